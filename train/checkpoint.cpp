#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/checksum.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/files.h"
#include "train/grad_sync.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kManifest = "manifest.json";
// The files every checkpoint holds besides the manifest and the optimizer's state (written
// between the parameters and state.json: optim/optimizer.h's StateTensor names them).
constexpr const char* kParams = "params.bin";
constexpr const char* kState = "state.json";
constexpr const char* kConfig = "config.yaml";
constexpr const char* kFiles[] = {kParams, kState, kConfig};

// Writes BYTES to PATH and fsyncs it: once this returns, the bytes survive a power cut.
void write_synced(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_fault("create", path.string(), errno);
  try {
    write_all(fd, bytes, path.string());
  } catch (const SystemFault&) {
    ::close(fd);
    throw;
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw io_fault("fsync", path.string(), err);
  }
  if (::close(fd) != 0) throw io_fault("close", path.string(), errno);
}

// A directory's entries (a file created or renamed in it) are durable once it is fsynced.
void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw io_fault("open directory", dir.string(), errno);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw io_fault("fsync directory", dir.string(), errno);
}

std::string_view bytes_of(const FlatBuffer& b) {
  return {reinterpret_cast<const char*>(b.data()), b.bytes()};
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

// What must match for a checkpoint to load into a run: the keys that shape the parameter
// and moment buffers or the meaning of their values.
json compatibility(const Config& cfg, size_t param_count) {
  const ModelConfig& m = cfg.model;
  return {{"model.vocab_size", m.vocab_size},
          {"model.seq_len", m.seq_len},
          {"model.d_model", m.d_model},
          {"model.n_layers", m.n_layers},
          {"model.n_heads", m.n_heads},
          {"param_count", param_count},
          {"precision.dtype", name(cfg.precision.dtype)},
          {"optimizer.name", name(cfg.optimizer.name)}};
}

json state_json(const TrainState& state, const std::vector<uint64_t>& positions) {
  const LossScalerState& s = state.scaler.state();
  return {{"step", state.step},
          {"adam_step_count", state.optimizer->step_count()},
          {"loss_scaler",
           {{"scale", s.scale},
            {"growth_tracker", s.growth_tracker},
            {"hysteresis_tracker", s.hysteresis_tracker},
            {"consecutive_skips", s.consecutive_skips},
            {"skipped_total", s.skipped_total}}},
          {"data_positions", positions},
          {"last_grad_norm",
           std::isnan(state.last_grad_norm) ? json(nullptr) : json(state.last_grad_norm)}};
}

// A file's checksum and its manifest entry (format version 2; version 1 used fnv1a64).
uint64_t file_checksum(std::string_view bytes) { return xxh3_64(bytes.data(), bytes.size()); }
json file_entry(size_t bytes, uint64_t checksum) {
  return {{"bytes", bytes}, {"xxh3_64", hex64(checksum)}};
}

std::string replicated_file(const std::string& name) { return name + ".bin"; }
// The per-rank state of RANK, which differs per rank.
std::string rank_file(const std::string& name, int rank) {
  return name + "-rank-" + std::to_string(rank) + ".bin";
}

// The optimizer's per-rank state tensors grouped by file name, in the order listed.
std::vector<std::pair<std::string, std::vector<FlatBuffer*>>> per_rank_groups(
    const std::vector<StateTensor>& tensors) {
  std::vector<std::pair<std::string, std::vector<FlatBuffer*>>> out;
  for (const StateTensor& t : tensors) {
    if (!t.per_rank) continue;
    if (out.empty() || out.back().first != t.name) out.push_back({t.name, {}});
    out.back().second.push_back(t.buffer);
  }
  return out;
}

// Writes the files every rank shares into DIR, fsynced; returns their manifest entries.
json write_shared(const fs::path& dir, const Config& cfg, const FlatBuffer& params,
                  const TrainState& state, const std::vector<uint64_t>& positions) {
  const std::vector<StateTensor> tensors = state.optimizer->state_tensors();
  const std::string state_text = state_json(state, positions).dump(2) + "\n";
  const std::string config_text = config_to_yaml(cfg);
  std::vector<FlatBuffer> host(tensors.size() + 1);
  std::vector<std::pair<std::string, std::string_view>> contents;  // file, bytes
  contents.push_back({kParams, bytes_of(on_host(params, host[0]))});
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].per_rank)
      contents.push_back(
          {replicated_file(tensors[i].name), bytes_of(on_host(*tensors[i].buffer, host[i + 1]))});
  contents.push_back({kState, state_text});
  contents.push_back({kConfig, config_text});
  json files = json::object();
  for (const auto& [file, bytes] : contents) {
    write_synced(dir / file, bytes);
    files[file] = file_entry(bytes.size(), file_checksum(bytes));
  }
  return files;
}

// manifest.json (the commit marker), then DIR.
void write_manifest(const fs::path& dir, const Config& cfg, const json& files, int step,
                    size_t param_count, int world) {
  const json manifest = {{"format_version", kCheckpointFormatVersion},
                         {"step", step},
                         {"world_size", world},
                         {"compatibility", compatibility(cfg, param_count)},
                         {"files", files}};
  write_synced(dir / kManifest, manifest.dump(2) + "\n");
  sync_dir(dir);
}

// The step-N checkpoints under DIR, newest first (step-N.tmp and other names are not).
std::vector<std::pair<long, fs::path>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<long, fs::path>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) != 0 || n.size() == 5) continue;
    if (!std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    found.emplace_back(std::stol(n.substr(5)), e.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  return found;
}

// Rank 0's commit: rename DIR.tmp to DIR, then prune.
void commit(const fs::path& final_dir, int keep) {
  const fs::path tmp = final_dir.string() + ".tmp";
  fs::remove_all(final_dir);  // a step saved again (resumed with resume: never)
  fs::rename(tmp, final_dir);
  sync_dir(final_dir.parent_path());
  const auto all = list_checkpoints(final_dir.parent_path());
  for (size_t i = size_t(keep); i < all.size(); ++i) fs::remove_all(all[i].second);
}

// Runs F (on the ranks where RUN is true), then agrees: throws on every rank, naming what
// failed, if F threw on any rank.
template <class F>
void on_ranks(GradSync& sync, bool run, const fs::path& dir, F&& f) {
  std::string error;
  if (run) {
    try {
      f();
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown error";
    }
  }
  if (sync.any_rank(!error.empty()))
    throw SystemFault("cannot save checkpoint '" + dir.string() +
                      "': " + (error.empty() ? "another rank failed" : error));
}

std::string read_whole(const fs::path& path) {
  return read_regular_file(path.string(), kNoSizeLimit, "checkpoint file");
}

// Reads DIR's manifest and checks every file it must list against its size and checksum;
// returns the manifest. Throws InputError naming DIR and the first problem.
json verify(const fs::path& dir) {
  const std::string where = "checkpoint '" + dir.string() + "': ";
  if (!fs::is_regular_file(dir / kManifest))
    throw InputError(where +
                     "no manifest.json (not a checkpoint, or one that was never "
                     "finished)");
  try {
    const json manifest = json::parse(read_whole(dir / kManifest));
    const int version = manifest.at("format_version").get<int>();
    if (version > kCheckpointFormatVersion || version < 1)
      throw InputError(where + "format version " + std::to_string(version) +
                       ", this build reads version " + std::to_string(kCheckpointFormatVersion));
    const json& listed = manifest.at("files");
    for (const char* file : kFiles) listed.at(file);  // every shared file must be listed
    for (const auto& [file, entry] : listed.items()) {
      if (file.find('/') != std::string::npos || file == "..")
        throw InputError(where + "manifest.json lists '" + file + "', not a file name");
      const std::string bytes = read_whole(dir / file);
      const size_t expected = entry.at("bytes").get<size_t>();
      if (bytes.size() != expected)
        throw InputError(where + file + " has " + std::to_string(bytes.size()) +
                         " bytes, the manifest says " + std::to_string(expected) +
                         (bytes.size() < expected ? " (truncated)" : ""));
      const bool v1 = version == 1;
      const uint64_t sum = v1 ? fnv1a64(bytes.data(), bytes.size()) : file_checksum(bytes);
      if (hex64(sum) != entry.at(v1 ? "fnv1a64" : "xxh3_64").get<std::string>())
        throw InputError(where + file + " does not match its checksum in manifest.json");
    }
    return manifest;
  } catch (const json::exception& e) {
    throw InputError(where + "manifest.json is not a checkpoint manifest: " + e.what());
  }
}

// Refuses a checkpoint written for another model shape, dtype or optimizer, naming every
// key that differs.
void check_compatible(const json& manifest, const Config& cfg, size_t param_count,
                      const fs::path& dir) {
  const json want = compatibility(cfg, param_count);
  const json have = manifest.value("compatibility", json::object());
  std::string diff;
  for (const auto& [key, value] : want.items()) {
    const std::string saved = have.contains(key) ? have[key].dump() : "missing";
    if (saved != value.dump())
      diff += (diff.empty() ? "" : ", ") + key + " is " + saved + " there, " + value.dump() +
              " in the config";
  }
  if (!diff.empty())
    throw InputError("checkpoint '" + dir.string() + "' was written for another run: " + diff);
}

// The file's bytes into BUF, on whatever device BUF lives (through a host copy).
void read_into(const fs::path& path, FlatBuffer& buf) {
  const std::string bytes = read_whole(path);
  if (bytes.size() != buf.bytes())
    throw InputError("'" + path.string() + "' has " + std::to_string(bytes.size()) +
                     " bytes, expected " + std::to_string(buf.bytes()));
  if (buf.runtime().host_memory()) {
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    return;
  }
  FlatBuffer host(buf.size());
  std::memcpy(host.data(), bytes.data(), bytes.size());
  copy_buffer(buf, host);
}

// BUFS, each as long as it is, from the bytes of PATH (checked against their total), on
// whatever device each lives (through a host copy).
void read_group(const fs::path& path, const std::vector<FlatBuffer*>& bufs) {
  const std::string bytes = read_whole(path);
  size_t total = 0;
  for (const FlatBuffer* b : bufs) total += b->bytes();
  if (bytes.size() != total)
    throw InputError("'" + path.string() + "' has " + std::to_string(bytes.size()) +
                     " bytes, expected " + std::to_string(total));
  size_t at = 0;
  for (FlatBuffer* b : bufs) {
    if (b->runtime().host_memory()) {
      std::memcpy(b->data(), bytes.data() + at, b->bytes());
    } else {
      FlatBuffer host(b->size());
      std::memcpy(host.data(), bytes.data() + at, b->bytes());
      copy_buffer(*b, host);
    }
    at += b->bytes();
  }
}

// The optimizer's per-rank state from DIR. Saved by this world size: this rank's own files.
// Saved by another: every saved rank's files, handed to the optimizer to keep in a form
// valid here (Optimizer::adopt_world_change). Files missing (none saved): zeros, with a
// warning on rank 0.
void load_per_rank(const fs::path& dir, const json& manifest, int rank, int world, Optimizer& opt) {
  const std::vector<StateTensor> tensors = opt.state_tensors();
  const auto groups = per_rank_groups(tensors);
  if (groups.empty()) return;
  const int saved_world = manifest.value("world_size", 0);
  const json& listed = manifest.at("files");
  bool complete = saved_world > 0;
  for (const auto& [name, bufs] : groups)
    for (int r = 0; r < saved_world; ++r)
      complete = complete && listed.contains(rank_file(name, r));
  if (!complete) {
    for (const StateTensor& t : tensors)
      if (t.per_rank) t.buffer->zero();
    if (rank == 0)
      std::fprintf(stderr,
                   "ringstep: warning: checkpoint '%s' holds no per-rank optimizer state of its "
                   "%d ranks: it starts from zero\n",
                   dir.c_str(), saved_world);
    return;
  }
  if (saved_world == world) {
    for (const auto& [name, bufs] : groups) read_group(dir / rank_file(name, rank), bufs);
    return;
  }
  std::vector<std::vector<FlatBuffer>> saved(static_cast<size_t>(saved_world));
  for (int r = 0; r < saved_world; ++r) {
    for (const StateTensor& t : tensors)
      if (t.per_rank) saved[size_t(r)].emplace_back(t.buffer->size());
    size_t k = 0;
    for (const auto& [name, bufs] : groups) {
      std::vector<FlatBuffer*> into;
      for (size_t i = 0; i < bufs.size(); ++i) into.push_back(&saved[size_t(r)][k++]);
      read_group(dir / rank_file(name, r), into);
    }
  }
  opt.adopt_world_change(saved, saved_world, world);
  if (rank == 0)
    std::printf(
        "resume: the optimizer's per-rank state of %d ranks is carried over to %d "
        "(docs/optim.md)\n",
        saved_world, world);
}

}  // namespace

std::string checkpoints_dir(const Config& cfg) { return cfg.run.out_dir + "/checkpoints"; }

// The checkpoint's files into TMP, committed as DIR (save_checkpoint's steps).
static void save_into(const fs::path& tmp, const fs::path& dir, const Config& cfg,
                      const FlatBuffer& params, const TrainState& state,
                      const std::vector<uint64_t>& positions, GradSync& sync) {
  const bool lead = sync.rank() == 0;
  json files;
  on_ranks(sync, lead, dir, [&] {
    fs::remove_all(tmp);  // left by a run that died while writing
    fs::create_directories(tmp);
    files = write_shared(tmp, cfg, params, state, positions);
  });
  // Each rank writes its own per-rank state into the directory rank 0 made.
  for (const auto& [name, bufs] : per_rank_groups(state.optimizer->state_tensors())) {
    std::string bytes;
    FlatBuffer host;
    for (const FlatBuffer* b : bufs) bytes += bytes_of(on_host(*b, host));
    on_ranks(sync, true, dir, [&] { write_synced(tmp / rank_file(name, sync.rank()), bytes); });
    const std::vector<uint64_t> hashes = sync.gather(file_checksum(bytes));
    for (int r = 0; r < sync.world(); ++r)
      files[rank_file(name, r)] = file_entry(bytes.size(), hashes[r]);
  }
  on_ranks(sync, lead, dir, [&] {
    write_manifest(tmp, cfg, files, state.step, params.size(), sync.world());
    commit(dir, cfg.checkpoint.keep);
  });
}

std::string save_checkpoint(const Config& cfg, const FlatBuffer& params, const TrainState& state,
                            GradSync& sync) {
  // Every rank's position is in hand before rank 0 commits: the rename waits for all.
  const std::vector<uint64_t> positions = sync.gather(state.data->position());
  const fs::path dir = fs::path(checkpoints_dir(cfg)) / ("step-" + std::to_string(state.step));
  const fs::path tmp = dir.string() + ".tmp";
  const bool lead = sync.rank() == 0;
  try {
    save_into(tmp, dir, cfg, params, state, positions, sync);
  } catch (const SystemFault&) {
    std::error_code ec;
    if (lead) fs::remove_all(tmp, ec);  // nothing half-written stays behind
    throw;
  }
  return dir.string();
}

uint64_t checkpoint_bytes(const std::string& dir) {
  const json manifest = json::parse(read_whole(fs::path(dir) / kManifest));
  uint64_t total = fs::file_size(fs::path(dir) / kManifest);
  for (const auto& [name, entry] : manifest.at("files").items())
    total += entry.at("bytes").get<uint64_t>();
  return total;
}

std::string newest_checkpoint(const std::string& checkpoints, bool warn) {
  for (const auto& [step, dir] : list_checkpoints(checkpoints)) {
    try {
      verify(dir);
      return dir.string();
    } catch (const InputError& e) {
      if (warn) std::fprintf(stderr, "ringstep: warning: skipping %s\n", e.what());
    }
  }
  return "";
}

std::string find_resume_checkpoint(const Config& cfg, bool warn) {
  const std::string& resume = cfg.checkpoint.resume;
  if (resume == "never") return "";
  if (resume != "auto") {
    if (!fs::is_directory(resume))
      throw InputError("checkpoint.resume: '" + resume +
                       "' is not a checkpoint directory (expected RUN_DIR/checkpoints/step-N), "
                       "auto or never");
    verify(resume);
    return resume;
  }
  return newest_checkpoint(checkpoints_dir(cfg), warn);
}

std::string checkpoint_at(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) {
    verify(path);
    return path;
  }
  if (std::string dir = newest_checkpoint(path + "/checkpoints", true); !dir.empty()) return dir;
  throw InputError("'" + path +
                   "' is neither a checkpoint (RUN_DIR/checkpoints/step-N) nor a run directory "
                   "holding one that verifies (train with checkpoint.every > 0)");
}

void load_checkpoint_params(const std::string& dir, const Config& cfg, FlatBuffer& params) {
  check_compatible(verify(dir), cfg, params.size(), dir);
  read_into(fs::path(dir) / kParams, params);
}

void load_checkpoint(const std::string& dir, const Config& cfg, int rank, int world,
                     FlatBuffer& params, TrainState& state) {
  const json manifest = verify(dir);
  check_compatible(manifest, cfg, params.size(), dir);
  read_into(fs::path(dir) / kParams, params);
  for (const StateTensor& t : state.optimizer->state_tensors()) {
    const std::string file = replicated_file(t.name);
    if (t.per_rank || (t.optional && !manifest.at("files").contains(file))) continue;
    read_into(fs::path(dir) / file, *t.buffer);
  }
  try {
    const json s = json::parse(read_whole(fs::path(dir) / kState));
    const json& ls = s.at("loss_scaler");
    state.step = s.at("step").get<int>();
    state.optimizer->set_step_count(s.at("adam_step_count").get<int64_t>());
    state.scaler.restore({ls.at("scale").get<double>(), ls.at("growth_tracker").get<int>(),
                          ls.at("hysteresis_tracker").get<int>(),
                          ls.at("consecutive_skips").get<int>(),
                          ls.at("skipped_total").get<int64_t>()});
    // Absent in checkpoints written before the field; null when no step had been applied.
    const json norm = s.value("last_grad_norm", json(nullptr));
    state.last_grad_norm = norm.is_null() ? NAN : norm.get<double>();
    const std::vector<uint64_t> positions = s.at("data_positions").get<std::vector<uint64_t>>();
    const bool same_world = int(positions.size()) == world;
    if (!same_world && rank == 0)
      std::printf(
          "resume: %s was saved by a %zu-rank run, resuming on %d ranks: the data continues where "
          "the "
          "saved run stopped; the steps are equivalent, not bit-identical (docs/formats.md)\n",
          dir.c_str(), positions.size(), world);
    state.data->seek(positions.at(same_world ? rank : 0));
  } catch (const json::exception& e) {
    throw InputError("checkpoint '" + dir + "': " + kState +
                     " is not a checkpoint state: " + e.what());
  } catch (const std::out_of_range&) {
    throw InputError("checkpoint '" + dir + "': " + kState + " lists no data position");
  }
  load_per_rank(dir, manifest, rank, world, *state.optimizer);
  state.optimizer->restore_params(params);
}

void check_run_dir_free(const Config& cfg) {
  if (cfg.run.overwrite) return;
  const fs::path root = cfg.run.out_dir;
  std::error_code ec;
  const bool steps = fs::exists(root / "steps.jsonl", ec);
  const bool checkpoints = !fs::is_empty(checkpoints_dir(cfg), ec) && !ec;
  if (!steps && !checkpoints) return;
  throw InputError(
      "run.out_dir '" + root.string() + "' already holds an earlier run (" +
      (steps ? "steps.jsonl" : "checkpoints/") +
      ") and there is no checkpoint to resume (checkpoint.resume: " + cfg.checkpoint.resume +
      "); set run.overwrite=true to replace it, or choose another run.out_dir");
}

}  // namespace ringstep
