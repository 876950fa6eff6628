# libdse as built: every symbol it exports carries the dse_ prefix, and each kernel object
# holds only the instructions of the CPU level it is installed for.
dsv_script_test(NAME test-dse-symbols SCRIPT ${CMAKE_SOURCE_DIR}/tests/check-dse-symbols.sh
  ARGS $<TARGET_FILE:dse> LABELS unit)
dsv_script_test(NAME test-kernel-isa SCRIPT ${CMAKE_SOURCE_DIR}/tests/check-kernel-isa.sh
  ARGS $<TARGET_FILE:dse> LABELS unit)
