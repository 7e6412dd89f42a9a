#pragma once
// 128-bit integers for the tools' exact sums of nano-credits and nanoseconds (the core's own
// Balance is one), named once for every tool. __extension__ keeps -Wpedantic quiet about a type
// that GCC and Clang both have.

namespace creditloop::tools {

__extension__ typedef __int128 I128;
__extension__ typedef unsigned __int128 U128;

}  // namespace creditloop::tools
