# libdse as built: each kernel object holds only the instructions of the CPU level it is
# installed for.
dsv_script_test(NAME test-kernel-isa SCRIPT ${CMAKE_SOURCE_DIR}/tests/check-kernel-isa.sh
  ARGS $<TARGET_FILE:dse> LABELS unit)
