# Fails when a file of layer LAYER includes a kiln header outside ALLOWED
# (comma-separated folders under src/kiln: the layer and those below it);
# writes STAMP when every include is allowed. Run by kiln_check_layer
# (cmake/layers.cmake):
#   cmake -DLAYER=io -DALLOWED=io,runtime,... -DFILES=a.cpp,b.h -DSTAMP=io.ok -P check_layers.cmake
string(REPLACE "," ";" allowed "${ALLOWED}")
string(REPLACE "," ";" files "${FILES}")
set(errors "")
foreach(f ${files})
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"kiln/")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"kiln/([^\"]*)\".*" "\\1" header "${line}")
    get_filename_component(folder "${header}" DIRECTORY)
    if(folder STREQUAL "")
      set(folder "kiln.h (the whole library)")
    endif()
    list(FIND allowed "${folder}" at)
    if(at EQUAL -1)
      string(APPEND errors "  ${f}: #include \"kiln/${header}\" reaches layer '${folder}'\n")
    endif()
  endforeach()
endforeach()
if(errors)
  string(REPLACE ";" ", " may "${allowed}")
  message(FATAL_ERROR "src/kiln/${LAYER} includes a layer above it or beside it:\n${errors}"
                      "src/kiln/${LAYER} may include: ${may} (cmake/layers.cmake, src/kiln/CMakeLists.txt)")
endif()
file(WRITE "${STAMP}" "ok\n")
