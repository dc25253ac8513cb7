# `cmake --install`: the CLI, libckpt (shared and static), the whole
# include/ tree, ckpt.pc for pkg-config and a CMake package config
# (find_package(ckpt) gives ckpt::ckpt, shared, and ckpt::ckpt_static).
# Both ckpt.pc and the package config locate the prefix relative to
# themselves, so the tree can be installed with --prefix or moved.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CKPT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)

install(TARGETS ckpt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ckpt_shared ckpt_static EXPORT ckptTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT ckptTargets NAMESPACE ckpt:: DESTINATION ${CKPT_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ckptConfig.cmake.in
    ${CMAKE_BINARY_DIR}/ckptConfig.cmake INSTALL_DESTINATION ${CKPT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ckptConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${CMAKE_BINARY_DIR}/ckptConfig.cmake ${CMAKE_BINARY_DIR}/ckptConfigVersion.cmake
        DESTINATION ${CKPT_CMAKE_DIR})

# ckpt.pc: prefix=${pcfiledir}/<back to the prefix>, so --prefix works.
set(CKPT_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "ckpt.pc needs CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR "
                      "relative to the prefix")
endif()
file(RELATIVE_PATH CKPT_PC_TO_PREFIX /prefix/${CKPT_PC_DIR} /prefix)
string(REPLACE ";" " " CKPT_PC_REQUIRES_PRIVATE "${CKPT_PC_DEPS}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/ckpt.pc.in ${CMAKE_BINARY_DIR}/ckpt.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ckpt.pc DESTINATION ${CKPT_PC_DIR})
