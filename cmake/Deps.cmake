# Every third-party library comes from a Debian package and is found with pkg-config.
# A missing one stops the configure step with the package to install.
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
dsv_require_pkg(mhd      libmicrohttpd libmicrohttpd-dev)
dsv_require_pkg(curl     libcurl       libcurl4-openssl-dev)

# Debian's libnng-dev ships a CMake package, not a pkg-config file.
find_package(nng QUIET CONFIG)
if(NOT nng_FOUND)
  message(FATAL_ERROR "dsvisor needs nng: install the Debian package 'libnng-dev' "
                      "(scripts/bootstrap.sh installs every dependency).")
endif()
add_library(dsv::nng ALIAS nng::nng)
