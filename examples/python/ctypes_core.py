#!/usr/bin/env python3
"""creditloop from Python through the C API, with the standard library's ctypes alone.

Usage: ctypes_core.py path/to/libcreditloop_c.so

Two tenants on the reference plans; alice (pro) goes out in P1 while she has credit, bob
(lite) in P2. Exits non-zero when the library decided otherwise.
"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libcreditloop_c.so")


class Participant(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_uint64 * 2)]


class Ticket(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_uint64 * 2)]


class Request(ctypes.Structure):
    _fields_ = [("internal_", ctypes.c_uint64 * 8), ("user", ctypes.c_void_p)]


class Dispatch(ctypes.Structure):
    _fields_ = [("request", ctypes.POINTER(Request)), ("ticket", Ticket),
                ("participant", Participant), ("out_class", ctypes.c_int),
                ("turn_class", ctypes.c_int)]


lib.creditloop_strerror.restype = ctypes.c_char_p
lib.creditloop_config_parse_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                             ctypes.c_size_t]
lib.creditloop_core_new.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.c_char_p, ctypes.c_size_t]
lib.creditloop_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.c_uint32, ctypes.c_int64, ctypes.POINTER(Participant)]
lib.creditloop_request_init.argtypes = [ctypes.POINTER(Request), ctypes.c_void_p]
lib.creditloop_submit.argtypes = [ctypes.c_void_p, Participant, ctypes.POINTER(Request),
                                  ctypes.c_int64]
lib.creditloop_dispatch.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(Dispatch),
                                    ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
lib.creditloop_version_number.restype = ctypes.c_uint
lib.creditloop_complete.argtypes = [ctypes.c_void_p, Ticket, ctypes.c_double, ctypes.c_int64,
                                    ctypes.c_void_p]
lib.creditloop_core_free.argtypes = [ctypes.c_void_p]
lib.creditloop_config_free.argtypes = [ctypes.c_void_p]


def check(status):
    if status != 0:
        raise RuntimeError(lib.creditloop_strerror(status).decode())


plans = b'''{"classes": 2,
  "plans": {"pro": {"P1": {"rate": 2, "burst": 4}, "P2": {"rate": 5, "burst": 10}},
            "lite": {"P2": {"rate": 5, "burst": 10}}},
  "tenants": [{"name": "alice", "key": "alice-secret", "plan": "pro"},
              {"name": "bob", "key": "bob-secret", "plan": "lite"}]}'''
config, core = ctypes.c_void_p(), ctypes.c_void_p()
message = ctypes.create_string_buffer(256)
check(lib.creditloop_config_parse_json(plans, len(plans), ctypes.byref(config), message, 256))
check(lib.creditloop_core_new(config, ctypes.byref(core), message, 256))

tenants = {}
for name, plan in ((b"alice", b"pro"), (b"bob", b"lite")):
    tenants[name] = Participant()
    check(lib.creditloop_add(core, name, plan, 1, 0, ctypes.byref(tenants[name])))

requests = (Request * 4)()
for i, owner in enumerate((b"alice", b"alice", b"bob", b"bob")):
    lib.creditloop_request_init(ctypes.byref(requests[i]), i)
    check(lib.creditloop_submit(core, tenants[owner], ctypes.byref(requests[i]), 0))

out = (Dispatch * 8)()
count = ctypes.c_size_t()
check(lib.creditloop_dispatch(core, 0, out, 8, ctypes.byref(count)))
n = count.value
decided = [(out[i].request.contents.user or 0, "P%d" % (out[i].out_class + 1)) for i in range(n)]
print(decided)
for i in range(n):
    check(lib.creditloop_complete(core, out[i].ticket, 0.5, 0, None))
lib.creditloop_core_free(core)
lib.creditloop_config_free(config)
# The library this runs with is at least as new as the one this was written for (0.2.0).
if lib.creditloop_version_number() < 200:
    sys.exit("library older than 0.2.0")
if decided != [(0, "P1"), (1, "P1"), (2, "P2"), (3, "P2")]:
    sys.exit("unexpected decisions")
