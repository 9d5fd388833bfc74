# cmake -DBUILD_DIR=… -DSOURCE_DIR=… -DWORK_DIR=… [-DCXX_COMPILER=…] [-DPYTHON=…] -P install_test.cmake
#
# Installs the build in BUILD_DIR into WORK_DIR/prefix, checks the layout, then configures, builds
# and runs the outside project in SOURCE_DIR with find_package(torchfarm) against that prefix, the
# way a user's project would. Run by ctest (install_outside_project, label integration).
cmake_minimum_required(VERSION 3.19)

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(path bin/torchfarm-supervisor bin/torchfarm-worker bin/torchfarm bin/torchfarm-mkmodel
             include/torchfarm/torchfarm/client.h include/torchfarm/torchfarm/torch_tensor.h
             include/torchfarm/common/protocol.h share/torchfarm/python/torchfarm/__init__.py
             share/torchfarm/configs/demo.json share/doc/torchfarm/docs/protocol.md)
  if(NOT EXISTS ${prefix}/${path})
    message(FATAL_ERROR "not installed: ${prefix}/${path}")
  endif()
endforeach()
file(GLOB_RECURSE config_files ${prefix}/*/torchfarmConfig.cmake)
if(NOT config_files)
  message(FATAL_ERROR "no torchfarmConfig.cmake under ${prefix}")
endif()

# The installed programs start (their libraries resolve from the install location).
run("installed torchfarm-mkmodel --help" ${prefix}/bin/torchfarm-mkmodel --help)
run("installed torchfarm-supervisor --help" ${prefix}/bin/torchfarm-supervisor --help)

set(compiler_arg)
if(CXX_COMPILER)
  set(compiler_arg -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
run("configuring the outside project" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release ${compiler_arg})
run("building the outside project" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("running the outside project" ${WORK_DIR}/build/outside_client)
message(STATUS "outside_client: ${run_output}")
if(NOT run_output MATCHES "connect_status: OK")
  message(FATAL_ERROR "outside_client printed: ${run_output}")
endif()

# The Python package imports from its installed place. (No ';' in commands passed to run(): it
# would split them.)
if(PYTHON AND EXISTS ${PYTHON})
  execute_process(COMMAND ${PYTHON} -c "import zmq, numpy" RESULT_VARIABLE no_modules
                  OUTPUT_QUIET ERROR_QUIET)
  if(NOT no_modules)
    run("importing the installed Python package" ${CMAKE_COMMAND} -E env
        PYTHONPATH=${prefix}/share/torchfarm/python
        ${PYTHON} -c "print(__import__('torchfarm').__file__)")
    if(NOT run_output MATCHES "^${prefix}/share/torchfarm/python/torchfarm/__init__.py")
      message(FATAL_ERROR "python imported torchfarm from elsewhere: ${run_output}")
    endif()
  endif()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
