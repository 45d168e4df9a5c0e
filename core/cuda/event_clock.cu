#include <cuda_runtime_api.h>

#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/event_clock.h"

namespace ringstep::cuda {
namespace {

class EventClock final : public DeviceClock {
 public:
  explicit EventClock(size_t capacity) {
    while (events_.size() < capacity) grow();
  }
  ~EventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  int mark() override {
    if (next_ == events_.size()) grow();
    CUDA_CHECK(cudaEventRecord(events_[next_], nullptr));
    return int(next_++);
  }
  void wait(int mark) override { CUDA_CHECK(cudaEventSynchronize(events_.at(size_t(mark)))); }
  double elapsed_ms(int from, int to) override {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(size_t(from)), events_.at(size_t(to))));
    return ms;
  }
  void clear() override { next_ = 0; }

 private:
  void grow() {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }

  std::vector<cudaEvent_t> events_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<DeviceClock> make_event_clock(size_t capacity) {
  return std::make_unique<EventClock>(capacity);
}

}  // namespace ringstep::cuda
