#pragma once
// Deferred parameter initialisation. A model built only to be overwritten by
// a checkpoint need not compute its random initial values: while a DeferInit
// is alive on this thread, nn::materialize (which model constructors call)
// leaves tensors pending, so an 8B-parameter model loaded as bf16 never holds
// 32 GB of f32 initial weights. The values stay defined (each initialiser
// keeps its generator key), and are computed when materialized later.
namespace kiln::nn {

class DeferInit {
 public:
  DeferInit();
  ~DeferInit();
  DeferInit(const DeferInit&) = delete;
  DeferInit& operator=(const DeferInit&) = delete;

 private:
  bool prev_;
};

// True inside a DeferInit on this thread.
bool init_deferred();

}  // namespace kiln::nn
