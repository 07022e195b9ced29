// TurboQuant's Lloyd–Max centroids for a unit Gaussian, ascending (quant/turbo.h), as lists that both the
// host codec and the CUDA kernels (ops/cuda/kv_codec.cuh) build their tables from.
#pragma once

#define LMX_TURBO_CENTROIDS_2 -1.5104f, -0.4528f, 0.4528f, 1.5104f
#define LMX_TURBO_CENTROIDS_3 -2.1520f, -1.3440f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3440f, 2.1520f
#define LMX_TURBO_CENTROIDS_4                                                                                \
  -2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f, 0.1284f, 0.3881f, 0.6568f, \
      0.9424f, 1.2562f, 1.6181f, 2.0690f, 2.7326f
