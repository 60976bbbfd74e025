# kvserve_area(NAME [DEPS targets...])
#
# Builds src/NAME/*.cc (except *_test.cc) into the static library
# kvserve_NAME, linked PUBLIC to DEPS, with include/ and src/ on its include
# path; and, when tests are on, src/NAME/*_test.cc into the GoogleTest binary
# test_NAME, registered with CTest (one CTest entry per test case).
function(kvserve_area NAME)
  cmake_parse_arguments(ARG "" "" "DEPS;TEST_DEPS" ${ARGN})
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
  target_include_directories(kvserve_${NAME} PUBLIC
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kvserve_${NAME} PUBLIC ${ARG_DEPS} Threads::Threads)
  if(KVSERVE_BUILD_TESTS AND _tests)
    add_executable(test_${NAME} ${_tests})
    target_link_libraries(test_${NAME} PRIVATE kvserve_${NAME} ${ARG_TEST_DEPS}
      GTest::gtest GTest::gtest_main GTest::gmock)
    gtest_discover_tests(test_${NAME} DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS ${NAME})
  endif()
endfunction()
