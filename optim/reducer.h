// What an optimizer sees of data parallelism, so that optim/ never links comm/. The trainer
// hands one to whatever needs ranks to agree: the loss scaler's skip flag (any_rank), and
// an optimizer that exchanges its own state (1-bit Adam's compressed momentum exchange,
// sign_average) or averages gradients itself (average).
//
// Contract: every method but world() is a collective. Every rank calls it, in the same
// order, with the same n; it blocks until the result is in place, and every rank gets the
// same bits. With one rank each call is local and free. Called from one thread (the
// training thread). train/grad_sync.h implements it.
#pragma once

#include <cstddef>
#include <functional>

#include "core/config.h"  // OneBitScale

namespace ringstep {

// How sign_average codes: the scale of each sign code, and how many elements share one
// scale inside a tensor (BLOCK; 0 = one scale per tensor). Blocks start at each tensor's
// first element, so a block that is a multiple of a matrix's row length holds whole rows.
struct SignCode {
  OneBitScale scale = OneBitScale::mean_abs;
  size_t block = 0;
};

// What one sign_average call did on this rank.
struct SignExchange {
  size_t bytes_sent = 0;      // point-to-point payload this rank sent
  double worker_sq_err = 0;   // ||z - s sign z||^2 of the vector this rank compressed
  double worker_sq_norm = 0;  // ||z||^2, z = buf + worker_error
};

// What the gradient AllReduce of the current step cost this rank (GradSync::finish's
// measurement; zeros with one rank or when none ran).
struct ExchangeCost {
  double comm_ms = 0;     // time in flight
  double exposed_ms = 0;  // time the training thread waited for it
  size_t sent_bytes = 0;  // bytes this rank put on the links
};

// What coding a vector for sign_average costs this rank, measured without an exchange.
struct SignCost {
  double code_ms = 0;     // the worker stage, the server stage and the decoding, every part
  size_t sent_bytes = 0;  // what sign_average would send from this rank
};

class Reducer {
 public:
  virtual ~Reducer() = default;

  virtual int world() const = 0;  // the ranks taking part
  // buf[0, n) = the mean over ranks of buf[0, n).
  virtual void average(float* buf, size_t n) = 0;
  // True on every rank if FLAG is true on any rank.
  virtual bool any_rank(bool flag) = 0;
  // buf[0, n) = the 1-bit compressed mean over ranks of buf[0, n) with error feedback
  // (comm/sign_allreduce.h: one bit per element and one scale per CODE block per message,
  // worker and server error buffers), the same bits on every rank. n is the length of the
  // buffers the reducer was set up for (the parameters); WORKER_ERROR and SERVER_ERROR hold
  // n elements each, this rank's, laid out like buf, updated in place.
  // The reducer works in parts that cover [0, n) once each, and calls PREPARE(begin, end)
  // just before it reads buf[begin, end) and FINISH(begin, end) once that part holds its
  // mean, on the calling thread, so that the caller can compute each part's input and use
  // its output while other parts are in flight. Either may be empty.
  using Part = std::function<void(size_t begin, size_t end)>;
  // INPUT, where given, forms the vector as it is coded, instead of reading BUF: INPUT(begin,
  // end, z) adds its elements [begin, end) into z[0, end - begin), in pieces of a part, each
  // called once, possibly from several of the rank's compute threads at once
  // (comm/sign_allreduce.h's SignInput). BUF is then only the output. PREPARE still runs
  // before each part.
  using Input = std::function<void(size_t begin, size_t end, float* z)>;
  SignExchange sign_average(float* buf, float* worker_error, float* server_error, size_t n,
                            const SignCode& code, const Part& prepare, const Part& finish) {
    begin_sign_average(buf, worker_error, server_error, n, code, prepare);
    return finish_sign_average(finish);
  }
  // Whether begin_sign_average takes an INPUT (a host path). False (a device path, whose
  // buffers the CPU may not read): BUF must hold the vector when PREPARE has run for a part.
  virtual bool takes_input() const { return true; }
  // sign_average in two halves, for input that becomes ready part by part (1-bit Adam's
  // momentum during backward): after begin_sign_average the reducer may prepare and send
  // parts as the caller reports them ready (GradSync: through backward's unit hook);
  // finish_sign_average prepares and sends the rest, then finishes every part; with an empty
  // FINISH (a step abandoned) nothing is decoded and BUF is left as it was. Other
  // collectives may run in between (they queue behind the parts sent). Both are collectives.
  virtual void begin_sign_average(float* buf, float* worker_error, float* server_error, size_t n,
                                  const SignCode& code, Part prepare, Input input = {}) = 0;
  virtual SignExchange finish_sign_average(const Part& finish) = 0;

  // For an optimizer that decides whether compressing pays (1-bit Adam's compress: auto).
  // Local, not collectives; the defaults measure nothing.
  virtual ExchangeCost last_gradient_exchange() const { return {}; }
  // Codes BUF[0, n) (left unchanged) as sign_average would, into scratch buffers, and times
  // it; between sign_average calls only.
  virtual SignCost measure_sign_code(const float* /*buf*/, size_t /*n*/, const SignCode&) {
    return {};
  }
};

}  // namespace ringstep
