#include "comm/device_comm.h"

#include <string>

#include "comm/nccl/nccl_comm.h"
#include "core/error.h"

#ifdef RINGSTEP_HAVE_NCCL
#include "comm/nccl/nccl_device_comm.h"
#endif

namespace ringstep {

std::unique_ptr<DeviceComm> make_nccl_device_comm(Communicator& host, double timeout_s) {
  if (const std::string why = nccl::unavailable_reason(); !why.empty())
    throw InputError("comm.backend: nccl is not available: " + why);
#ifdef RINGSTEP_HAVE_NCCL
  return std::make_unique<nccl::NcclDeviceComm>(host, timeout_s);
#else
  (void)host;
  (void)timeout_s;
  return nullptr;  // unavailable_reason said why
#endif
}

}  // namespace ringstep
