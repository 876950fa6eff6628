# `cmake --install`: the programs into bin/ (dsvisor finds dsvisor-worker beside it), the
# seed's command names deepseek-convert and ds-runtime (front ends of dsvisor convert and
# dsvisor start, supervisor/frontends/), and the bundled default model into
# share/dsvisor/models/default, where dsvisor start looks for it (supervisor/served_model.c).
# The front ends are copied into the build's bin/ too, beside the dsvisor they run.
set(DSV_FRONTENDS deepseek-convert ds-runtime)
foreach(f ${DSV_FRONTENDS})
  configure_file(${CMAKE_SOURCE_DIR}/supervisor/frontends/${f} ${CMAKE_BINARY_DIR}/bin/${f} COPYONLY)
  install(PROGRAMS ${CMAKE_SOURCE_DIR}/supervisor/frontends/${f} TYPE BIN)
endforeach()
install(TARGETS dsvisor dsvisor-worker RUNTIME)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/models/default/ DESTINATION share/dsvisor/models/default
        PATTERN "ref" EXCLUDE)
