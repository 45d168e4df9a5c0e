// Checkpoints (docs/formats.md "Checkpoints"): RUN_DIR/checkpoints/step-N/ holds the
// parameters, the optimizer's state (its state_tensors(), optim/optimizer.h) and step count,
// the loss scaler's state, the step, every rank's data-stream position and the effective
// config; manifest.json, written last, lists every file with its size and checksum and is
// what makes a checkpoint exist. Per-rank optimizer state (1-bit Adam's error buffers)
// differs per rank: each rank writes its own file into it.
// A run resumed from step N is bit-identical, from step N + 1 on, to one that never
// stopped (same config and world size). Rank 0 writes; every rank reads (the run directory
// must be on a file system every rank sees).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/registry.h"

namespace ringstep {

class GradSync;
struct TrainState;

// 2: files are checksummed with XXH3-64 ("xxh3_64"); 1 (still read): FNV-1a 64 ("fnv1a64").
constexpr int kCheckpointFormatVersion = 2;

// RUN_DIR/checkpoints, where checkpoints are saved and resume: auto looks.
std::string checkpoints_dir(const Config& cfg);

// Saves STATE and PARAMS as RUN_DIR/checkpoints/step-STATE.step: rank 0 writes
// step-N.tmp/ (every file fsynced, manifest.json last), renames it to step-N once every
// rank's data position has been gathered, then deletes all but the checkpoint.keep newest.
// Collective: every rank calls it at the same step, and every rank returns only once the
// checkpoint is committed (or throws std::runtime_error on every rank if rank 0 could not
// write it). Returns the checkpoint's path.
std::string save_checkpoint(const Config& cfg, const FlatBuffer& params, const TrainState& state,
                            GradSync& sync);

// The bytes of the files of the checkpoint at DIR, as its manifest lists them.
uint64_t checkpoint_bytes(const std::string& dir);

// The newest checkpoint under CHECKPOINTS (a RUN_DIR/checkpoints directory) that verifies,
// or "" when none does; each one that does not is skipped, with a warning on stderr when WARN.
std::string newest_checkpoint(const std::string& checkpoints, bool warn);

// The checkpoint checkpoint.resume names: "" for never, or for auto when RUN_DIR holds no
// checkpoint that verifies (each one that does not is skipped with a warning on stderr
// when WARN). A PATH must verify. Throws InputError naming the path and what is wrong.
std::string find_resume_checkpoint(const Config& cfg, bool warn);

// Loads the checkpoint at DIR into PARAMS and STATE (step, the optimizer's state and step
// count, scaler, this rank's data position, this rank's per-rank optimizer state; saved by
// another world size, every saved rank's, carried over by Optimizer::adopt_world_change).
// Throws InputError when it does
// not verify or was written for another model shape, dtype or optimizer (the message names what
// differs). With another world size, every rank seeks to rank 0's saved position (docs/formats.md).
void load_checkpoint(const std::string& dir, const Config& cfg, int rank, int world,
                     FlatBuffer& params, TrainState& state);

// The checkpoint to read weights from: PATH itself when it is a checkpoint
// (RUN_DIR/checkpoints/step-N), else the newest checkpoint that verifies in the run
// directory PATH. Throws InputError when there is none.
std::string checkpoint_at(const std::string& path);
// Loads only the parameters of the checkpoint at DIR (which must verify and match CFG's
// model shape) into PARAMS: what `ringstep export` and train.init_from need.
void load_checkpoint_params(const std::string& dir, const Config& cfg, FlatBuffer& params);

// Refuses (InputError) a run directory that holds the steps or checkpoints of an earlier
// run when nothing is being resumed, unless run.overwrite is set.
void check_run_dir_free(const Config& cfg);

}  // namespace ringstep
