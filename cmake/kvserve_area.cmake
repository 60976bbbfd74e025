# kvserve_area(NAME [LAB] [DEPS targets...] [TEST_DEPS targets...])
#
# Builds src/NAME/*.cc (except *_test.cc) into the static library
# kvserve_NAME, linked PUBLIC to DEPS; and, when tests are on,
# src/NAME/*_test.cc into the GoogleTest binary test_NAME, registered with
# CTest (one CTest entry per test case).
#
# LAB marks an area that is not part of the installed library: the lab code
# of the CLI (src/experiments), built on the public library only. Its own
# headers are in src/NAME/include/ (its public include path); it does not
# see src/.
#
# The area libraries are the building blocks of the one installed library
# (cmake/kvserve_library.cmake puts their objects into libkvserve.so and
# libkvserve.a); they are never installed. include/ is their public include
# path and src/ a private one: code outside src/ that needs an internal
# header (a test, a benchmark) links kvserve_internal, which adds src/.
if(NOT TARGET kvserve_internal)
  add_library(kvserve_internal INTERFACE)
  target_include_directories(kvserve_internal INTERFACE ${PROJECT_SOURCE_DIR}/src)
endif()

function(kvserve_area NAME)
  cmake_parse_arguments(ARG "LAB" "" "DEPS;TEST_DEPS" ${ARGN})
  file(GLOB _all CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(_srcs "")
  set(_tests "")
  foreach(f ${_all})
    if(f MATCHES "_test\\.cc$")
      list(APPEND _tests ${f})
    else()
      list(APPEND _srcs ${f})
    endif()
  endforeach()
  add_library(kvserve_${NAME} STATIC ${_srcs})
  target_link_libraries(kvserve_${NAME} PUBLIC ${ARG_DEPS} Threads::Threads)
  if(ARG_LAB)
    target_include_directories(kvserve_${NAME} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  else()
    target_include_directories(kvserve_${NAME}
      PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include
      PRIVATE ${PROJECT_SOURCE_DIR}/src)
    set_property(GLOBAL APPEND PROPERTY KVSERVE_AREA_TARGETS kvserve_${NAME})
    # (DEFER evaluates its arguments when the call runs: bake the name in now.)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _kvserve_record_links kvserve_${NAME})")
  endif()
  if(KVSERVE_BUILD_TESTS AND _tests)
    add_executable(test_${NAME} ${_tests})
    target_link_libraries(test_${NAME} PRIVATE kvserve_${NAME} kvserve_internal ${ARG_TEST_DEPS}
      GTest::gtest GTest::gtest_main GTest::gmock)
    gtest_discover_tests(test_${NAME} DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS ${NAME})
  endif()
endfunction()
