# Run by `cmake --install` (see CMakeLists.txt): writes the systemd unit and the
# pkg-config file with the prefix being installed to.
set(_root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
set(PREFIX "${CMAKE_INSTALL_PREFIX}")
set(BINDIR "${CMAKE_INSTALL_PREFIX}/${SEEDD_BINDIR}")
set(DOCDIR "${CMAKE_INSTALL_PREFIX}/${SEEDD_DOCDIR}")
set(LIBDIR "${SEEDD_LIBDIR}")
set(INCLUDEDIR "${SEEDD_INCLUDEDIR}")
set(VERSION "${SEEDD_VERSION}")
foreach(pair "seedd.service.in|lib/systemd/system/seedd.service"
             "seedd.pc.in|${SEEDD_LIBDIR}/pkgconfig/seedd.pc")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 in)
  list(GET pair 1 out)
  message(STATUS "Installing: ${_root}/${out}")
  configure_file("${SEEDD_SOURCE_DIR}/packaging/${in}" "${_root}/${out}" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_root}/${out}")
endforeach()
