# Every third-party library comes from a Debian package and is found with pkg-config.
# A missing one stops the configure step with the package to install. libmicrohttpd is
# the exception: Debian 12 ships 0.9.75, so it is built from Debian's 1.0.1 source
# (scripts/build-libmicrohttpd.sh) into a cache prefix, DSV_MHD_PREFIX.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

function(dsv_require_pkg target module debian_pkg)
  pkg_check_modules(${target} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${target}_FOUND)
    message(FATAL_ERROR "dsvisor needs ${module}: install the Debian package '${debian_pkg}' "
                        "(scripts/bootstrap.sh installs every dependency).")
  endif()
  add_library(dsv::${target} ALIAS PkgConfig::${target})
endfunction()

dsv_require_pkg(cjson    libcjson      libcjson-dev)
dsv_require_pkg(numa     numa          libnuma-dev)
dsv_require_pkg(hwloc    hwloc         libhwloc-dev)
dsv_require_pkg(cgroup   libcgroup     libcgroup-dev)
dsv_require_pkg(systemd  libsystemd    libsystemd-dev)
dsv_require_pkg(pcre2    libpcre2-8    libpcre2-dev)
dsv_require_pkg(utf8proc libutf8proc   libutf8proc-dev)
dsv_require_pkg(gnutls   gnutls        libgnutls28-dev)
dsv_require_pkg(curl     libcurl       libcurl4-openssl-dev)

# Debian's libnng-dev ships a CMake package, not a pkg-config file.
find_package(nng QUIET CONFIG)
if(NOT nng_FOUND)
  message(FATAL_ERROR "dsvisor needs nng: install the Debian package 'libnng-dev' "
                      "(scripts/bootstrap.sh installs every dependency).")
endif()
add_library(dsv::nng ALIAS nng::nng)

# libmicrohttpd >= 1.0 from the prefix scripts/build-libmicrohttpd.sh fills; the script
# says where that is by default, so the path is written down once.
if(NOT DEFINED DSV_MHD_PREFIX)
  execute_process(COMMAND "${CMAKE_CURRENT_LIST_DIR}/../scripts/build-libmicrohttpd.sh" --print-prefix
                  OUTPUT_VARIABLE dsv_mhd_default_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE dsv_mhd_prefix_rc)
  if(NOT dsv_mhd_prefix_rc EQUAL 0)
    message(FATAL_ERROR "scripts/build-libmicrohttpd.sh --print-prefix failed (${dsv_mhd_prefix_rc})")
  endif()
  set(DSV_MHD_PREFIX "${dsv_mhd_default_prefix}" CACHE PATH
      "where scripts/build-libmicrohttpd.sh installed libmicrohttpd 1.0.1")
endif()
# pkg_check_modules keeps the library file it found in the cache (pkgcfg_lib_mhd_*): a
# build directory configured against another libmicrohttpd would go on linking that one.
unset(pkgcfg_lib_mhd_microhttpd CACHE)
set(dsv_saved_pkg_config_path "$ENV{PKG_CONFIG_PATH}")
set(ENV{PKG_CONFIG_PATH} "${DSV_MHD_PREFIX}/lib/pkgconfig:$ENV{PKG_CONFIG_PATH}")
pkg_check_modules(mhd QUIET IMPORTED_TARGET GLOBAL libmicrohttpd>=1.0)
set(ENV{PKG_CONFIG_PATH} "${dsv_saved_pkg_config_path}")
if(NOT mhd_FOUND)
  pkg_check_modules(dsv_mhd_other QUIET libmicrohttpd)
  if(dsv_mhd_other_FOUND)
    set(dsv_mhd_other " (pkg-config finds only ${dsv_mhd_other_VERSION}, whose parser answers some malformed requests 500)")
  endif()
  message(FATAL_ERROR "dsvisor needs libmicrohttpd >= 1.0 in DSV_MHD_PREFIX=${DSV_MHD_PREFIX}${dsv_mhd_other}: "
                      "run scripts/build-libmicrohttpd.sh (scripts/bootstrap.sh runs it), "
                      "or point -DDSV_MHD_PREFIX at a libmicrohttpd 1.0 install.")
endif()
get_filename_component(dsv_mhd_found_prefix "${mhd_PREFIX}" REALPATH)
get_filename_component(dsv_mhd_wanted_prefix "${DSV_MHD_PREFIX}" REALPATH)
if(NOT dsv_mhd_found_prefix STREQUAL dsv_mhd_wanted_prefix)
  message(FATAL_ERROR "libmicrohttpd ${mhd_VERSION} was found in ${mhd_PREFIX}, not in DSV_MHD_PREFIX=${DSV_MHD_PREFIX}: "
                      "run scripts/build-libmicrohttpd.sh (its build carries a fix the gateway relies on), "
                      "or pass -DDSV_MHD_PREFIX=${mhd_PREFIX} to use that one.")
endif()
# The prefix holds a static library: its own dependencies (Requires.private: gnutls;
# Libs.private: pthreads) come with it. For a shared one they are harmless.
set_property(TARGET PkgConfig::mhd APPEND PROPERTY INTERFACE_LINK_LIBRARIES PkgConfig::gnutls Threads::Threads)
add_library(dsv::mhd ALIAS PkgConfig::mhd)
