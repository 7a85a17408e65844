# kiln's layers as CMake targets.
#
# kiln_layer(FOLDER DEPS...): the library kiln_<folder> (slashes become
# underscores) from src/kiln/FOLDER's sources, linking the layers DEPS
# (folders declared before it). A folder with headers only becomes an
# INTERFACE library.
#
# kiln_check_layer(TARGET FOLDER DEPS...): before TARGET builds, every file
# of src/kiln/FOLDER may include only kiln headers of FOLDER itself and of the
# layers DEPS reach (transitively); anything else stops the build with the
# file, the line and the layers it may include (cmake/check_layers.cmake).

function(kiln_layer_closure out)
  set(closure "")
  foreach(dep ${ARGN})
    get_property(dep_closure GLOBAL PROPERTY KILN_LAYER_CLOSURE_${dep})
    list(APPEND closure ${dep} ${dep_closure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set(${out} "${closure}" PARENT_SCOPE)
endfunction()

function(kiln_check_layer target folder)
  kiln_layer_closure(closure ${ARGN})
  set_property(GLOBAL PROPERTY KILN_LAYER_CLOSURE_${folder} "${closure}")
  set(dir ${PROJECT_SOURCE_DIR}/src/kiln/${folder})
  file(GLOB files CONFIGURE_DEPENDS ${dir}/*.h ${dir}/*.cpp ${dir}/*.cuh ${dir}/*.cu)
  string(REPLACE "/" "_" id ${folder})
  set(stamp ${CMAKE_BINARY_DIR}/layer_checks/${id}.ok)
  string(REPLACE ";" "," allowed "${folder};${closure}")
  string(REPLACE ";" "," file_list "${files}")
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DLAYER=${folder} -DALLOWED=${allowed} -DFILES=${file_list} -DSTAMP=${stamp}
            -P ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake
    COMMENT "Checking that src/kiln/${folder} includes only the layers below it" VERBATIM)
  add_custom_target(${target}_layer_check DEPENDS ${stamp})
  add_dependencies(${target} ${target}_layer_check)
endfunction()

function(kiln_layer folder)
  string(REPLACE "/" "_" id ${folder})
  set(target kiln_${id})
  set(dir ${PROJECT_SOURCE_DIR}/src/kiln/${folder})
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.cu)
  set(deps "")
  foreach(dep ${ARGN})
    string(REPLACE "/" "_" dep_id ${dep})
    list(APPEND deps kiln_${dep_id})
  endforeach()
  if(sources)
    add_library(${target} ${sources})
    target_link_libraries(${target} PUBLIC kiln_core ${deps})
  else()
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE kiln_core ${deps})
  endif()
  kiln_check_layer(${target} ${folder} core ${ARGN})
endfunction()
