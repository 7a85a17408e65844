// The seeds' training loop in C++: model to device, loop over batches, zero
// grads, forward, backward, optimizer step, mark_step(). A small MLP with
// dropout learns which of 4 classes a synthetic point belongs to (the class
// is decided by a fixed random "teacher" network); the loss falls, and the
// metrics report shows one compile for the whole run.
//
//   build/bin/train_mlp [--steps N] [--batch B] [--device cpu:0]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

struct Args {
  int steps = 300;
  int64_t batch = 64;
  std::string device = "cpu:0";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "train_mlp: flag ", f, " needs a value");
      return argv[++i];
    };
    if (f == "--steps") a.steps = std::stoi(value());
    else if (f == "--batch") a.batch = std::stoll(value());
    else if (f == "--device") a.device = value();
    else throw Error("train_mlp: unknown flag '" + f + "' (expected --steps, --batch or --device)");
  }
  KILN_CHECK(a.steps > 0 && a.batch > 0, "train_mlp: --steps and --batch must be positive");
  return a;
}

struct Linear {
  Tensor weight, bias;
  Linear(int64_t in, int64_t out, Generator& gen, Device d, const std::string& name) {
    // Initialised on the device, then materialised before training.
    weight = (randn({out, in}, gen, d) * (1.0 / std::sqrt(static_cast<double>(in)))).set_name(name + ".weight");
    bias = zeros({out}, DType::f32, d).set_name(name + ".bias");
  }
  Tensor operator()(const Tensor& x) const { return linear(x, weight, bias); }
};

}  // namespace

int main(int argc, char** argv) try {
  Args args = parse(argc, argv);
  Device dev = Device::parse(args.device);
  constexpr int64_t kIn = 16, kHidden = 64, kClasses = 4;

  Generator init(0), data(1), drop(2);
  Linear fc1(kIn, kHidden, init, dev, "fc1"), fc2(kHidden, kHidden, init, dev, "fc2"),
      fc3(kHidden, kClasses, init, dev, "fc3");
  Linear teacher(kIn, kClasses, init, dev, "teacher");
  mark_step(dev);  // materialise the initial weights: the training step starts from data
  std::vector<Tensor> params{fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias};
  for (auto& p : params) p.requires_grad_();
  optim::AdamW opt(params, {.lr = 3e-3, .weight_decay = 0.01});

  metrics::reset();
  std::printf("training a %lld-%lld-%lld-%lld MLP on %s, batch %lld, %d steps\n", (long long)kIn,
              (long long)kHidden, (long long)kHidden, (long long)kClasses, dev.str().c_str(),
              (long long)args.batch, args.steps);
  float first = 0, last = 0;
  for (int step = 1; step <= args.steps; ++step) {
    // A batch: random points, labelled by the teacher (computed in the same step).
    Tensor x = randn({args.batch, kIn}, data, dev);
    Tensor labels = argmax(teacher(x).detach(), -1);

    opt.zero_grad();
    Tensor h = dropout(gelu(fc1(x)), 0.1, drop);
    h = dropout(gelu(fc2(h)), 0.1, drop);
    Tensor loss = cross_entropy(fc3(h), labels);
    loss.backward();
    opt.step();
    mark_step(dev);

    if (step == 1 || step % 50 == 0 || step == args.steps) {
      last = loss.item();
      if (step == 1) first = last;
      std::printf("step %4d  loss %.4f\n", step, last);
    }
  }
  std::printf("\nloss %.4f -> %.4f\n\n%s", first, last, metrics::report().c_str());
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_mlp: error: %s\n", e.what());
  return 1;
}
