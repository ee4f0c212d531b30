"""`palw build` / `palw source`: the PALW-patched llama.cpp runtime, built reproducibly.

The steps live in small modules, in the order a build runs them: ``source`` (get and
verify the sdist), ``patching`` (seed patch + overlays), ``toolchain`` (cmake, ninja,
compilers), ``cache_key``, ``ninja`` (configure/compile with progress), ``manifest``,
``binding`` (the llama-cpp-python package); ``api`` ties them together and
``commands`` is the CLI. ``archive`` and ``pruning`` make the offline source archive.
"""
