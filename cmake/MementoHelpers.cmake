# Helpers shared by the module CMakeLists files.

# memento_add_module(<name> SOURCES ...)
# Creates library memento_<name> with alias memento::<name>; public headers in
# <module dir>/include (memento/<name>/...), internals in <module dir>/src.
function(memento_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(memento_${name} ${ARG_SOURCES})
  add_library(memento::${name} ALIAS memento_${name})
  target_include_directories(memento_${name}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(memento_${name} PUBLIC memento_common)
  set_target_properties(memento_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON
                                                   EXPORT_NAME ${name})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set_property(GLOBAL APPEND PROPERTY MEMENTO_EXPORTED_TARGETS memento_${name})
endfunction()

# memento_add_gtest(<target> LABEL <label> [TIMEOUT s] [FILTER pattern] [PREFIX p])
# Registers the GoogleTest cases of <target> with ctest, each with a label and a timeout.
function(memento_add_gtest target)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT;FILTER;PREFIX" "" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(extra)
  if(ARG_FILTER)
    list(APPEND extra TEST_FILTER "${ARG_FILTER}")
  endif()
  if(ARG_PREFIX)
    list(APPEND extra TEST_PREFIX "${ARG_PREFIX}")
  endif()
  gtest_discover_tests(${target} ${extra}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${ARG_TIMEOUT})
endfunction()

# Installs the exported targets and a package config so that another project can
# find_package(memento) and link memento::erasure etc.
function(memento_install_package)
  get_property(targets GLOBAL PROPERTY MEMENTO_EXPORTED_TARGETS)
  install(TARGETS ${targets} EXPORT mementoTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT mementoTargets NAMESPACE memento::
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memento)
  include(CMakePackageConfigHelpers)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mementoConfig.cmake.in
    ${PROJECT_BINARY_DIR}/mementoConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memento)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/mementoConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/mementoConfig.cmake
    ${PROJECT_BINARY_DIR}/mementoConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memento)
endfunction()
