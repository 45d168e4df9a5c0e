#include "optim/optimizer.h"

#include "optim/adamw.h"
#include "optim/onebit_adam.h"
#include "optim/zero_one_adam.h"

namespace ringstep {

void Optimizer::adopt_world_change(const std::vector<std::vector<FlatBuffer>>&, int, int) {}

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
    case OptimizerKind::zero_one_adam: {
      const ZeroOneConfig& zo = cfg.optimizer.zero_one;
      const OneBitConfig& ob = cfg.optimizer.onebit;  // the sign code's knobs
      return std::make_unique<ZeroOneAdam>(
          reg, hp,
          ZeroOneParams{zo.var_freeze_step, zo.var_update_scaler, zo.local_step_scaler,
                        zo.local_step_clipper, cfg.train.steps,
                        SignCode{ob.scale, size_t(ob.scale_block)}});
    }
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

}  // namespace ringstep
