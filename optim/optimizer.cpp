#include "optim/optimizer.h"

#include <stdexcept>

#include "optim/adamw.h"
#include "optim/onebit_adam.h"
#include "optim/zero_one_adam.h"

namespace ringstep {

void Optimizer::adopt_world_change(const std::vector<std::vector<FlatBuffer>>&, int, int) {}

void Optimizer::step_deferred(FlatBuffer&, const FlatBuffer&, const DeferredStep*) {
  throw std::logic_error("Optimizer::step_deferred on an optimizer without a deferred rule");
}

std::unique_ptr<Optimizer> make_optimizer(const Registry& reg, const Config& cfg, bool may_skip) {
  const AdamWParams hp{cfg.optimizer.betas[0], cfg.optimizer.betas[1], cfg.optimizer.eps,
                       cfg.train.weight_decay};
  switch (cfg.optimizer.name) {
    case OptimizerKind::adamw:
      return std::make_unique<AdamW>(reg, hp, cfg.run.device);
    case OptimizerKind::onebit_adam: {
      const OneBitConfig& ob = cfg.optimizer.onebit;
      return std::make_unique<OneBitAdam>(
          reg, hp,
          OneBitParams{ob.freeze_step, ob.scale, ob.scale_block, ob.overlap && cfg.comm.overlap,
                       may_skip, ob.compress},
          cfg.run.device);
    }
    case OptimizerKind::zero_one_adam:
      return std::make_unique<ZeroOneAdam>(reg, hp, zero_one_params(cfg));
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

}  // namespace ringstep
