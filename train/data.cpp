#include "train/data.h"

#include <stdexcept>

#include "train/synthetic.h"
#include "train/file_source.h"

namespace ringstep {

std::unique_ptr<DataSource> make_data_source(const Config& cfg, const std::string& split, int rank,
                                             int world) {
  if (split != "train" && split != "val")
    throw std::invalid_argument("make_data_source: split must be train or val, not " + split);
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("make_data_source: bad rank/world");
  return cfg.data.source == DataSourceKind::file ? make_file_source(cfg, split, rank, world)
                                                 : make_synthetic_source(cfg, split, rank, world);
}

DataInfo data_info(const Config& cfg) {
  DataInfo info;
  if (cfg.data.source == DataSourceKind::synthetic) {
    const MarkovChain chain(cfg.model.vocab_size, cfg.run.seed);
    info.entropy_rate = chain.entropy_rate();
    info.window_floor = chain.window_floor(cfg.model.seq_len);
  }
  return info;
}

}  // namespace ringstep
