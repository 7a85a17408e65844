#pragma once
// Tensor operations (libtorch-like names). Each validates its inputs, infers
// the result's shape and records an IR node: nothing runs until mark_step()
// or a value is read. Shape errors name the op and both shapes.
#include <cstdint>
#include <string>
#include <functional>
#include <vector>

#include "kiln/runtime/tensor.h"

namespace kiln {

// creation (constants are part of the graph; host data is an input)
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor arange(int64_t n, DType dtype = DType::i64, Device device = Device::cpu());
Tensor arange(double start, double end, double step, DType dtype, Device device = Device::cpu());

// elementwise (broadcasting, type promotion as in PyTorch)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// x · sigmoid(x) (torch.nn.functional.silu).
Tensor silu(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf form, BERT) or "tanh" (GPT-2's gelu_new)
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// Rotary position embedding (transformers' apply_rotary_pos_emb): x·cos +
// rotate_half(x)·sin, rotate_half(x) = [-x[..., D/2:], x[..., :D/2]], for x
// [..., D] (D even, f32 or bf16) and tables broadcastable to x; f32. One
// kernel (Op::Rope) for x [B,H,T,D] with tables [B or 1,1,T,D], and for any
// other layout once the tables are broadcast to x.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);

// A scalar constant of `like`'s dtype (f32 when `like` is integral and v is not).
Tensor scalar_like(double v, const Tensor& like);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// reductions; empty axes = all
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);

// movement
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor view(const Tensor& x, const Shape& shape);     // same as reshape (values are immutable)
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor index_select(const Tensor& table, const Tensor& ids);  // rows of table (embedding)
// padding_idx >= 0: that row is read but gets no gradient (torch's nn.Embedding).
Tensor embedding(const Tensor& ids, const Tensor& table, int64_t padding_idx = -1);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);
// x with its slices index[i] (1-D, distinct ids) along dim replaced by src's
// slice i (torch.index_copy): in place when x's memory is free to take.
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// contraction: batch dims broadcast; transposes of the last two dims are folded in
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// x [..., in] · weightᵀ [out, in] + bias [out] (torch.nn.functional.linear)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// composites
Tensor softmax(const Tensor& x, int64_t axis = -1, const Tensor& additive_mask = {});
Tensor log_softmax(const Tensor& x, int64_t axis = -1, const Tensor& additive_mask = {});
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// logits [..., C], labels [...] (ids; ignore_index rows skipped); mean over the rest
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
Tensor mse_loss(const Tensor& input, const Tensor& target);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets);

class Generator;

// Fused scaled dot-product attention (ir/op.h's Attention), for q
// [B,H,Tq,D] and k, v [B,H,Tk,D]:
//   dropout(softmax(scale · q kᵀ, later keys at f32 min if causal, + mask)) v
// mask: additive f32 [B or 1,1,1,Tk], or undefined. dropout > 0 needs gen
// and draws what dropout() would draw on the [B,H,Tq,Tk] probabilities, so
// the composite and the fused op drop the same elements. Under Autocast the
// products take bf16 operands, as matmul's do.
struct AttentionSpec {
  Tensor mask;
  bool causal = false;
  double scale = 1.0;
  double dropout = 0.0;
  Generator* gen = nullptr;
  int64_t window = 0;  // causal with a sliding window: the last `window` keys (0: all)
  // Packed rows: integer segment ids [B, Tk] (Tq = Tk), each id one run of a
  // row; a query sees only its own segment's keys, and the kernel never reads
  // the others (undefined: one segment). The CPU kernel only: see
  // fused_attention_takes_segments.
  Tensor segments{};
};
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec);
// Whether a model should call fused_attention rather than spell attention
// out (matmul, softmax, dropout, matmul), per KILN_ATTENTION: "auto" (the
// default: always on the CPU, on a CUDA device under Autocast with head size
// 16, 32 or 64; both need a mask as above that needs no gradient), "fused"
// (wherever the op accepts the operands) or "composite" (never).
bool use_fused_attention(const Tensor& q, const Tensor& k, const Tensor& mask);
// Whether the fused op on q's device takes AttentionSpec::segments (the CPU's
// kernel does; elsewhere a model spells packed attention out with a mask).
bool fused_attention_takes_segments(const Tensor& q);

// Random numbers: a counter-based (Philox) stream. Each draw takes a new
// offset; the (seed, offset) key is a graph input, so drawing never
// recompiles, and element i of a draw is the same on any number of threads.
//
// Data parallelism: a replica holding samples [s, s + b) of a global batch
// sets sample_base = s; draws whose dim 0 is the batch (dropout masks) then
// number their elements as the whole batch would, so every split of the
// batch into replicas (or accumulation steps) draws the same masks.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed, offset_ = offset; }
  int64_t sample_base() const { return sample_base_; }
  void set_sample_base(int64_t s) { sample_base_ = s; }
  // The key tensor i64[3] {seed, offset, first element index} for the next
  // draw of `shape` (elements are numbered from sample_base rows of it).
  Tensor next_key(Device device, const Shape& shape = {});

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  int64_t sample_base_ = 0;
};

Tensor rand(const Shape& shape, Generator& gen, Device device = Device::cpu());   // U[0,1)
Tensor randn(const Shape& shape, Generator& gen, Device device = Device::cpu());  // N(0,1)
Tensor bernoulli(const Shape& shape, double p, Generator& gen, Device device = Device::cpu());
// Zeroes each element with probability p and scales the rest by 1/(1-p);
// identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true);

// Gradient checkpointing (torch.utils.checkpoint): fn(inputs), but backward()
// keeps only the inputs and recomputes fn's activations when the gradient
// reaches its output — less memory for one more forward of fn. fn must depend
// only on `inputs` and on weights (anything else it reads stays alive). Its
// dropout draws from `gen`, whose state is replayed so the recomputation
// draws the same masks. Under no_grad, or nested in a recomputation, it is
// plain fn(inputs).
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                  Generator* gen = nullptr);

// Data-parallel replicas (distributed/replica.h): the flattened concatenation of the
// f32 `tensors` summed over every replica of every process, times scale, as
// one f32 [total] tensor computed inside the step (an AllReduce node). Call it
// from a replica's thread with tensors on that replica's device.
Tensor all_reduce(const std::vector<Tensor>& tensors, double scale = 1.0);
// The flattened concatenation of tensors[k] as the replica of global rank
// roots[k] holds it (every replica passes its own tensors of the same shapes).
Tensor broadcast_from(const std::vector<Tensor>& tensors, const std::vector<int64_t>& roots);

}  // namespace kiln
