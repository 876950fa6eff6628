/* dse_internal.h — the engine internals that bench/ may read, in one documented place.
 *
 * The engine benchmarks measure the kernels against the memory bandwidth and write
 * synthetic model files, so they need more than dse.h: the kernel table and its
 * quantised-activation layout (kernels/kernels.h), a model's tensor directory
 * (model/model.h) and the native file format (model/format.h). These are not a stable
 * API: they change with the engine, and a benchmark that uses them is rebuilt with it.
 *
 * Build with the `dse_internal` CMake target (bench/CMakeLists.txt), which puts
 * engine/src on the include path; tests/check-layering.sh rejects any other
 * engine/src header in bench/. */
#ifndef DSE_INTERNAL_H
#define DSE_INTERNAL_H

#include "dse.h"
#include "kernels/kernels.h"
#include "model/format.h"
#include "model/model.h"

#endif
