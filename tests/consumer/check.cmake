# Installs the built library into a scratch prefix and builds and runs the consumer against it.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
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
execute_process(COMMAND ${CMAKE_CROSSCOMPILING_EMULATOR} ${WORK_DIR}/build/consumer
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "consumer run failed: ${rc} ${out}")
endif()
