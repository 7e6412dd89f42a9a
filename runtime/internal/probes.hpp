// runtime/internal/probes.hpp: static tracepoints (USDT) for perf, bpftrace and SystemTap.
//
// Each probe is one nop in the code and a note in the binary until a tool attaches to it, so they
// stay in release builds. List them with `perf list 'sdt_creditloop:*'` after
// `perf buildid-cache --add <binary or libcreditloop>`, or `readelf -n`. Built without
// <sys/sdt.h> (systemtap-sdt-dev), or with CREDITLOOP_USDT off, they compile to nothing.
#pragma once

#if defined(CREDITLOOP_USDT) && __has_include(<sys/sdt.h>)
#include <sys/sdt.h>
#define CREDITLOOP_PROBE2(name, a, b) DTRACE_PROBE2(creditloop, name, a, b)
#define CREDITLOOP_PROBE3(name, a, b, c) DTRACE_PROBE3(creditloop, name, a, b, c)
#define CREDITLOOP_PROBE4(name, a, b, c, d) DTRACE_PROBE4(creditloop, name, a, b, c, d)
#else
#define CREDITLOOP_PROBE2(name, a, b) ((void)0)
#define CREDITLOOP_PROBE3(name, a, b, c) ((void)0)
#define CREDITLOOP_PROBE4(name, a, b, c, d) ((void)0)
#endif
