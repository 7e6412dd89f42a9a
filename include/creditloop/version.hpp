// creditloop/version.hpp: the release this header belongs to.
//
// The single source of the version: CMakeLists.txt reads these three numbers, so the package
// version (find_package(creditloop X.Y)), the pkg-config files and this header always agree.
// Before 1.0 a minor release may change the API; a patch release never does, which is why the
// CMake package accepts a request only from the same minor version.
#pragma once

#define CREDITLOOP_VERSION_MAJOR 0
#define CREDITLOOP_VERSION_MINOR 2
#define CREDITLOOP_VERSION_PATCH 0
/// One number that orders releases: major * 10000 + minor * 100 + patch.
#define CREDITLOOP_VERSION \
  (CREDITLOOP_VERSION_MAJOR * 10000 + CREDITLOOP_VERSION_MINOR * 100 + CREDITLOOP_VERSION_PATCH)
#define CREDITLOOP_VERSION_STRING "0.2.0"
