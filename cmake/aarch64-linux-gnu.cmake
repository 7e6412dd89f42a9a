# Cross-compiles for AArch64 Linux with Debian's cross compiler (g++-aarch64-linux-gnu) and runs
# what it builds under qemu-user (tools/test-aarch64 installs both). ctest and
# gtest_discover_tests start every test binary through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CREDITLOOP_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_CXX_COMPILER ${CREDITLOOP_CROSS_TRIPLE}-g++)
set(CMAKE_C_COMPILER ${CREDITLOOP_CROSS_TRIPLE}-gcc)

# Debian's cross packages put the target's libraries and headers under /usr/aarch64-linux-gnu.
# Libraries come from there only, so that no host (x86-64) library is linked. The cross compiler
# searches the host's /usr/include after the target's own headers, and the header-only
# dependencies (nlohmann-json3-dev, libconcurrentqueue-dev) live there: headers and their CMake
# packages may come from either root. GoogleTest is built from its sources for the target
# (CREDITLOOP_GTEST_FROM_SOURCE, tests/CMakeLists.txt). Programs (ninja, qemu) are the host's.
set(CMAKE_FIND_ROOT_PATH /usr/${CREDITLOOP_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# The target's libcrypto (the C API's SHA-256 of tenant keys) comes from Debian's multiarch
# package libssl-dev:arm64 (tools/test-aarch64 installs it), under /usr/lib/aarch64-linux-gnu
# rather than the cross root; its headers are the host's /usr/include plus the target's
# configuration header in /usr/include/aarch64-linux-gnu, which the cross compiler searches.
set(OPENSSL_CRYPTO_LIBRARY /usr/lib/${CREDITLOOP_CROSS_TRIPLE}/libcrypto.so
    CACHE FILEPATH "The target's libcrypto")
set(OPENSSL_INCLUDE_DIR /usr/include CACHE PATH "OpenSSL's headers")

# qemu-user runs the target's binaries; -L points its dynamic loader at the target's libraries.
# The loader (the cross root's) searches the multiarch /lib/aarch64-linux-gnu before its own
# /lib, and there it finds libc6:arm64, a libc of another build than the loader: threaded
# programs then hung (the runtime's tests spun for minutes). LD_LIBRARY_PATH puts the cross
# root's libraries first; only what it lacks (libcrypto) comes from multiarch.
find_program(CREDITLOOP_QEMU NAMES qemu-aarch64 qemu-aarch64-static)
if(CREDITLOOP_QEMU)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CREDITLOOP_QEMU} -L /usr/${CREDITLOOP_CROSS_TRIPLE}
      -E LD_LIBRARY_PATH=/usr/${CREDITLOOP_CROSS_TRIPLE}/lib)
endif()
