#include "model/kernels/serial_region.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace srformer::kernels {

// LibTorch's CPU ops size their OpenMP teams from this thread's omp_get_max_threads() (the value
// at::set_num_threads sets), so lowering it here is enough and costs no allocation.
#ifdef _OPENMP
SerialRegion::SerialRegion() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
SerialRegion::~SerialRegion() { omp_set_num_threads(saved_); }
#else
SerialRegion::SerialRegion() = default;
SerialRegion::~SerialRegion() = default;
#endif

}  // namespace srformer::kernels
