// Translation unit that owns the shared precompiled header (see CMakeLists.txt).
