# The one library an engine links, and what `cmake --install` puts down
# (docs/install.md):
#
#   kvserve_shared  libkvserve.so  (CMake: kvserve::kvserve)
#   kvserve_static  libkvserve.a   (CMake: kvserve::kvserve_static)
#
# Both hold the objects of every area library (kvserve_area) and, when the
# CUDA backend is built, of kvserve_cuda: the sources compile once. Their
# only include path is include/ (plus the generated kvserve/version.h);
# src/ stays private to the areas. The shared library links its
# dependencies privately; the static one carries them in its link
# interface. Both use them flattened to library files, so that the
# installed package needs none of our build's imported targets.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Sets `out_var` to the linker items behind the link libraries `items`:
# area libraries contribute their dependencies (their objects are in the
# library already), imported targets their library files and their own
# dependencies, Threads::Threads stays a target (kvserveConfig finds it).
# Must run where the imported targets are visible (they are directory-scoped).
function(_kvserve_flatten_link out_var)
  set(result "")
  set(seen "")
  set(queue ${ARGN})
  while(queue)
    list(POP_FRONT queue item)
    if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
      set(item "${CMAKE_MATCH_1}")
    endif()
    if(item STREQUAL "" OR item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${item}")
    if(item STREQUAL "Threads::Threads")
      list(APPEND result Threads::Threads)
    elseif(TARGET ${item})
      get_target_property(_type ${item} TYPE)
      get_target_property(_imported ${item} IMPORTED)
      if(_imported AND NOT _type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(_location ${item} IMPORTED_LOCATION)
        if(NOT _location)
          get_target_property(_configs ${item} IMPORTED_CONFIGURATIONS)
          foreach(_config ${_configs})
            get_target_property(_location ${item} IMPORTED_LOCATION_${_config})
            if(_location)
              break()
            endif()
          endforeach()
        endif()
        if(_location)
          list(APPEND result "${_location}")
        endif()
      endif()
      if(_imported OR _type STREQUAL "INTERFACE_LIBRARY" OR item MATCHES "^kvserve_")
        get_target_property(_deps ${item} INTERFACE_LINK_LIBRARIES)
        if(_deps)
          list(APPEND queue ${_deps})
        endif()
      endif()
    elseif(item MATCHES "::")
      message(FATAL_ERROR "kvserve: link item ${item} is not a target visible here; find its "
                          "package where the area is added (cmake/kvserve_library.cmake)")
    elseif(item MATCHES "\\$<")
      message(WARNING "kvserve: link item ${item} left out of the library's link interface "
                      "(a generator expression)")
    else()
      list(APPEND result "${item}")
    endif()
  endwhile()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()

# Records the flattened third-party link items of `target` (an area library
# or kvserve_cuda) for kvserve_add_library. kvserve_area defers this call to
# the end of the area's directory, after every target_link_libraries there
# and while that directory's imported targets are visible.
function(_kvserve_record_links target)
  get_target_property(_libs ${target} INTERFACE_LINK_LIBRARIES)
  set(_own "")
  foreach(_lib ${_libs})
    if(NOT _lib MATCHES "^kvserve_")
      list(APPEND _own ${_lib})
    endif()
  endforeach()
  _kvserve_flatten_link(_flat ${_own})
  set_property(GLOBAL APPEND PROPERTY KVSERVE_LINK_ITEMS ${_flat})
endfunction()

# pkg-config form of the flattened items: library files and flags as they
# are, bare names as -l<name>, Threads::Threads as -pthread.
function(_kvserve_pkgconfig_libs out_var)
  set(result "")
  foreach(item ${ARGN})
    if(item STREQUAL "Threads::Threads")
      list(APPEND result "-pthread")
    elseif(item MATCHES "^-" OR IS_ABSOLUTE "${item}")
      list(APPEND result "${item}")
    else()
      list(APPEND result "-l${item}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES result)
  string(REPLACE ";" " " result "${result}")
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

# Call once, after every area (and src/cuda) has been added.
function(kvserve_add_library)
  get_property(_areas GLOBAL PROPERTY KVSERVE_AREA_TARGETS)
  set(_parts ${_areas})
  if(TARGET kvserve_cuda)
    list(APPEND _parts kvserve_cuda)
  endif()
  if(TARGET kvserve_cuda)
    # src/cuda finds CUDAToolkit in its own scope; find it here too so that
    # CUDA::cudart_static is visible for the flattening.
    find_package(CUDAToolkit REQUIRED)
    _kvserve_record_links(kvserve_cuda)
  endif()
  set(_objects "")
  foreach(_part ${_parts})
    list(APPEND _objects $<TARGET_OBJECTS:${_part}>)
  endforeach()
  get_property(_flat GLOBAL PROPERTY KVSERVE_LINK_ITEMS)
  list(REMOVE_DUPLICATES _flat)

  set(_includes
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

  add_library(kvserve_shared SHARED ${_objects})
  target_link_libraries(kvserve_shared PRIVATE ${_flat})
  target_include_directories(kvserve_shared INTERFACE ${_includes})
  target_compile_features(kvserve_shared INTERFACE cxx_std_20)
  set_target_properties(kvserve_shared PROPERTIES
    OUTPUT_NAME kvserve EXPORT_NAME kvserve LINKER_LANGUAGE CXX
    VERSION ${PROJECT_VERSION} SOVERSION ${KVSERVE_SOVERSION})

  add_library(kvserve_static STATIC ${_objects})
  target_link_libraries(kvserve_static INTERFACE ${_flat})
  target_include_directories(kvserve_static INTERFACE ${_includes})
  target_compile_features(kvserve_static INTERFACE cxx_std_20)
  set_target_properties(kvserve_static PROPERTIES
    OUTPUT_NAME kvserve EXPORT_NAME kvserve_static LINKER_LANGUAGE CXX)

  add_library(kvserve::kvserve ALIAS kvserve_shared)
  add_library(kvserve::kvserve_static ALIAS kvserve_static)

  # --- install: library, headers, CMake package, pkg-config file.
  install(TARGETS kvserve_shared kvserve_static EXPORT kvserveTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  file(GLOB _headers ${PROJECT_SOURCE_DIR}/include/kvserve/*.h)
  install(FILES ${_headers} ${PROJECT_BINARY_DIR}/include/kvserve/version.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvserve)
  set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvserve)
  install(EXPORT kvserveTargets NAMESPACE kvserve:: DESTINATION ${_cmake_dir})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvserveConfig.cmake.in
    ${PROJECT_BINARY_DIR}/kvserveConfig.cmake INSTALL_DESTINATION ${_cmake_dir})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvserveConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/kvserveConfig.cmake
    ${PROJECT_BINARY_DIR}/kvserveConfigVersion.cmake DESTINATION ${_cmake_dir})

  # kvserve.pc finds its prefix from its own location, so the installed tree
  # may be moved (or installed with --prefix) after configuring.
  set(_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  file(RELATIVE_PATH _pc_to_prefix /${_pc_dir} /)
  string(REGEX REPLACE "/$" "" _pc_to_prefix "${_pc_to_prefix}")
  set(KVSERVE_PC_PREFIX "\${pcfiledir}/${_pc_to_prefix}")
  _kvserve_pkgconfig_libs(KVSERVE_PC_LIBS_PRIVATE ${_flat})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvserve.pc.in ${PROJECT_BINARY_DIR}/kvserve.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/kvserve.pc DESTINATION ${_pc_dir})
endfunction()
