# Install rules and the CMake package of torchfarm (`find_package(torchfarm)` -> torchfarm::client).
# Included from the root CMakeLists.txt after every target exists. Layout under the prefix:
#
#   bin/                           torchfarm-supervisor, torchfarm-worker, torchfarm, torchfarm-mkmodel
#   lib/libtorchfarm_{client,common}.a
#   lib/cmake/torchfarm/           torchfarmConfig.cmake, torchfarmConfigVersion.cmake, targets
#   include/torchfarm/torchfarm/   client.h, multi_client.h, endpoint_pool.h, torch_tensor.h,
#                                  shm_region.h
#   include/torchfarm/common/      the common headers client.h includes
#   share/torchfarm/python/        the Python client package: PYTHONPATH=<prefix>/share/torchfarm/python
#   share/torchfarm/configs/       configs/*.json, configs/*.service
#   share/doc/torchfarm/           README.md, docs/, examples/
#
# The headers sit one level down (include/torchfarm/) so the generic `common/` folder does not
# land in the prefix's include/; the exported targets carry that include directory.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TORCHFARM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/torchfarm)
set(TORCHFARM_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/torchfarm)
set(TORCHFARM_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/torchfarm)

# The same names inside this build as for find_package users.
add_library(torchfarm::client ALIAS torchfarm_client)
add_library(torchfarm::common ALIAS torchfarm_common)
set_target_properties(torchfarm_client PROPERTIES EXPORT_NAME client)
set_target_properties(torchfarm_common PROPERTIES EXPORT_NAME common)

# The static libraries were compiled with LibTorch's C++ ABI choice; users must match it.
if(TORCH_CXX_FLAGS MATCHES "-D_GLIBCXX_USE_CXX11_ABI=([01])")
  target_compile_definitions(torchfarm_common INTERFACE _GLIBCXX_USE_CXX11_ABI=${CMAKE_MATCH_1})
endif()

set(TORCHFARM_PROGRAMS torchfarm-supervisor torchfarm-worker torchfarm torchfarm-mkmodel)
# Keep a LibTorch outside the system paths (pip's) findable from the installed binaries.
set_target_properties(${TORCHFARM_PROGRAMS} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${TORCHFARM_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(TARGETS torchfarm_client torchfarm_common EXPORT torchfarmTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES
  ${PROJECT_SOURCE_DIR}/clients/cpp/torchfarm/client.h
  ${PROJECT_SOURCE_DIR}/clients/cpp/torchfarm/endpoint_pool.h
  ${PROJECT_SOURCE_DIR}/clients/cpp/torchfarm/multi_client.h
  ${PROJECT_SOURCE_DIR}/clients/cpp/torchfarm/torch_tensor.h
  ${PROJECT_SOURCE_DIR}/clients/cpp/torchfarm/shm_region.h
  DESTINATION ${TORCHFARM_INSTALL_INCLUDEDIR}/torchfarm)
install(FILES
  ${PROJECT_SOURCE_DIR}/common/status.h
  ${PROJECT_SOURCE_DIR}/common/dtype.h
  ${PROJECT_SOURCE_DIR}/common/tensor_spec.h
  ${PROJECT_SOURCE_DIR}/common/bytes_items.h
  ${PROJECT_SOURCE_DIR}/common/protocol.h
  ${PROJECT_SOURCE_DIR}/common/shm_reference.h
  DESTINATION ${TORCHFARM_INSTALL_INCLUDEDIR}/common)

install(EXPORT torchfarmTargets NAMESPACE torchfarm:: DESTINATION ${TORCHFARM_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/torchfarmConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/torchfarmConfig.cmake
  INSTALL_DESTINATION ${TORCHFARM_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/torchfarmConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/torchfarmConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/torchfarmConfigVersion.cmake
  DESTINATION ${TORCHFARM_INSTALL_CMAKEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python/torchfarm
  DESTINATION ${TORCHFARM_INSTALL_DATADIR}/python
  FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/clients/python/pyproject.toml
  ${PROJECT_SOURCE_DIR}/clients/python/README.md
  DESTINATION ${TORCHFARM_INSTALL_DATADIR}/python)

file(GLOB TORCHFARM_CONFIG_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/configs/*.json
  ${PROJECT_SOURCE_DIR}/configs/*.service)
install(FILES ${TORCHFARM_CONFIG_FILES} DESTINATION ${TORCHFARM_INSTALL_DATADIR}/configs)

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
  PATTERN "__pycache__" EXCLUDE)

# Installs this build into a scratch prefix, then builds and runs tests/install/outside_project
# against it with find_package(torchfarm).
if(TORCHFARM_BUILD_TESTS)
  add_test(NAME install_outside_project
    COMMAND ${CMAKE_COMMAND}
      -DBUILD_DIR=${CMAKE_BINARY_DIR}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}/tests/install/outside_project
      -DWORK_DIR=${CMAKE_BINARY_DIR}/install_test
      -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DPYTHON=/usr/bin/python3
      -P ${PROJECT_SOURCE_DIR}/tests/install/install_test.cmake)
  set_tests_properties(install_outside_project PROPERTIES LABELS integration TIMEOUT 600)
endif()
