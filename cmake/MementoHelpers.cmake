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

# memento_add_gtest(<target> LABEL <label> [TIMEOUT s] [PREFIX p])
# Registers every GoogleTest case of <target> with ctest, each with the label and a
# timeout. The label belongs to the whole target (no filter), so a new suite in the
# target is always registered; memento_check_test_labels() refuses a test target
# that was never registered.
function(memento_add_gtest target)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT;PREFIX" "" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "memento_add_gtest(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_LABEL)
    message(FATAL_ERROR "memento_add_gtest(${target}): LABEL is required")
  endif()
  if(NOT ARG_LABEL MATCHES "^(unit|local|mpi|fault|python)$")
    message(FATAL_ERROR "memento_add_gtest(${target}): unknown label '${ARG_LABEL}'")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(extra)
  if(ARG_PREFIX)
    list(APPEND extra TEST_PREFIX "${ARG_PREFIX}")
  endif()
  gtest_discover_tests(${target} ${extra}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${ARG_TIMEOUT})
  set_property(TARGET ${target} PROPERTY MEMENTO_TEST_LABEL "${ARG_LABEL}")
  # "<label> <executable>" of every registered binary, for scripts that build
  # only some targets (scripts/test-sanitizers): a binary left unbuilt gets a
  # discovered placeholder test without labels, which a label filter skips
  # silently; the script checks these files instead.
  file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${target}.memento-gtest
       CONTENT "${ARG_LABEL} $<TARGET_FILE:${target}>\n")
endfunction()

# memento_check_test_labels(<dir>...)
# Configure-time check: every executable that links GoogleTest under <dir> is
# registered with memento_add_gtest, or names the add_test that runs it in its
# MEMENTO_TEST_DRIVEN_BY property. A test binary nobody registered fails the
# configure step instead of silently never running. (Labels of single tests are
# checked by the ctest test unit.every_test_labelled, which sees discovered tests.)
function(memento_check_test_labels)
  set(dirs ${ARGN})
  set(problems)
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      get_target_property(libs ${target} LINK_LIBRARIES)
      if(NOT type STREQUAL "EXECUTABLE" OR NOT libs MATCHES "GTest::")
        continue()
      endif()
      get_target_property(label ${target} MEMENTO_TEST_LABEL)
      get_target_property(driven ${target} MEMENTO_TEST_DRIVEN_BY)
      if(NOT label AND NOT driven)
        list(APPEND problems "test executable '${target}' (${dir}) is never registered: "
                             "call memento_add_gtest(${target} LABEL ...)")
      endif()
    endforeach()
  endwhile()
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "tests without a label:\n  ${text}")
  endif()
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

# memento_torch_pch(<target> [SKIP <source>...])
# With MEMENTO_TORCH_PCH, <target>'s sources compile with the libtorch headers that
# memento_torch_core precompiles (REUSE_FROM: built once, not once per target); SKIP
# names the sources that include no libtorch header (loading the precompiled
# header costs a few seconds a file). GCC uses a precompiled header only under the
# flags it was built with, -fPIC among them: memento_torch_core is position-independent
# (it is linked into the Python module) and an executable would otherwise be
# -fPIE, so <target> compiles with -fPIC. Another mismatch is reported by
# -Winvalid-pch and the headers are then parsed as without it.
function(memento_torch_pch target)
  cmake_parse_arguments(ARG "" "" "SKIP" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "memento_torch_pch(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT MEMENTO_TORCH_PCH)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM memento_torch_core)
  target_compile_options(${target} PRIVATE -fPIC)
  if(ARG_SKIP)
    set_source_files_properties(${ARG_SKIP} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
