# Installs the built library into a scratch prefix, then builds and runs consumers against it:
# through find_package (both targets) and through pkg-config (the core alone, compiled and linked
# with exactly the flags pkg-config gives, which name no threads).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
# What is installed is the public API: no runtime internals, nothing for tests only.
file(GLOB_RECURSE installed_headers RELATIVE ${WORK_DIR}/prefix/include ${WORK_DIR}/prefix/include/*)
foreach(internal IN ITEMS inbox mailbox parker ticket_cell lock_free_bag completion_block spin
                          futex probes)
  if(installed_headers MATCHES "/${internal}\\.hpp")
    message(FATAL_ERROR "a runtime internal is installed: ${internal}.hpp")
  endif()
endforeach()
# The core's archive calls nothing of threads or clocks: no pthread, no clock, no system call but
# the huge-page hint.
file(GLOB_RECURSE core_archive ${WORK_DIR}/prefix/*/libcreditloop_core.a)
execute_process(COMMAND ${NM} -u ${core_archive} OUTPUT_VARIABLE undefined RESULT_VARIABLE rc)
if(rc OR NOT undefined MATCHES "creditloop")
  message(FATAL_ERROR "nm -u ${core_archive} failed: ${rc}")
endif()
string(REGEX MATCHALL "[^ \n]*(pthread|clock_gettime|clock_nanosleep|syscall|futex|std6thread|sched_)[^ \n]*"
       forbidden "${undefined}")
if(forbidden)
  message(FATAL_ERROR "creditloop::core calls threads or clocks: ${forbidden}")
endif()
# A library built with sanitizers needs their runtimes in the consumer too.
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
# A cross build (TOOLCHAIN set) builds the consumer with the same toolchain file and runs it
# through the toolchain's emulator.
set(toolchain "")
set(CMAKE_CROSSCOMPILING_EMULATOR "")
if(TOOLCHAIN)
  include(${TOOLCHAIN})
  set(toolchain -DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build ${toolchain}
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=${flags}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer configure failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer build failed: ${rc}")
endif()
foreach(consumer IN ITEMS core runtime)
  execute_process(COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR} ${WORK_DIR}/build/consumer_${consumer}
                  RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out)
  if(rc OR NOT out MATCHES "${consumer} consumer ok")
    message(FATAL_ERROR "the ${consumer} consumer failed: ${rc} ${out}")
  endif()
endforeach()

find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${WORK_DIR}/prefix/lib/pkgconfig:${WORK_DIR}/prefix/lib64/pkgconfig)
foreach(pc IN ITEMS creditloop-core creditloop-runtime)
  execute_process(COMMAND ${PKG_CONFIG} --modversion ${pc} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc OR NOT version STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config ${pc}: '${version}' (${rc}), expected ${VERSION}")
  endif()
endforeach()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs creditloop-core
                OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(rc OR pc_flags MATCHES "pthread")
  message(FATAL_ERROR "pkg-config creditloop-core: '${pc_flags}' (${rc})")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(san_flags UNIX_COMMAND "${flags}")
execute_process(COMMAND ${CXX} ${san_flags} ${CONSUMER_DIR}/core_main.cpp ${pc_flags}
                        -o ${WORK_DIR}/consumer_core_pc RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the core consumer does not build with pkg-config's flags: ${err}")
endif()
execute_process(COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR} ${WORK_DIR}/consumer_core_pc
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc OR NOT out MATCHES "core consumer ok")
  message(FATAL_ERROR "the pkg-config core consumer failed: ${rc} ${out}")
endif()
