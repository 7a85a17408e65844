// kiln plot OUTPUT_DIR: trainer_state.json's log_history as an SVG of
// curves vs step: the training loss (with eval_loss), the learning rate, and
// one panel per other evaluation metric. Self-contained SVG, no dependency.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command.h"
#include "flags.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/json.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kUsage =
    "usage: kiln plot OUTPUT_DIR [--output FILE.svg]\n"
    "draws OUTPUT_DIR/trainer_state.json's loss, learning-rate and evaluation curves (default output:\n"
    "OUTPUT_DIR/training_curves.svg)";

using Points = std::vector<std::pair<double, double>>;  // (step, value)
struct Series {
  std::string name, color;
  Points points;
};
struct Panel {
  std::string title;
  std::vector<Series> series;
};

// transformers writes trainer_state.json with Python's json module, which
// spells a diverged loss NaN, Infinity or -Infinity (not JSON): outside
// strings those words become null, and their points are left out.
std::string python_floats_as_null(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    in_string = c == '"';
    size_t word = 0;
    for (std::string_view w : {"-Infinity", "Infinity", "NaN"})
      if (text.substr(i, w.size()) == w) word = w.size();
    if (word == 0) {
      out += c;
      continue;
    }
    out += "null";
    i += word - 1;
  }
  return out;
}

constexpr double kWidth = 760, kPanelHeight = 280;
constexpr double kLeft = 80, kRight = 20, kTop = 36, kBottom = 46;  // plot margins inside a panel

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g", v);
  return b;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

// About five round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  double raw = (hi - lo) / 5, mag = std::pow(10, std::floor(std::log10(raw))), step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Counted, not stepped: where step is below the values' precision (1e16 and 1e16 + 4), v + step == v.
  std::vector<double> t;
  const double first = std::ceil(lo / step);
  for (int i = 0; i < 12; ++i) {
    const double v = (first + i) * step;
    if (v > hi + step * 1e-9) break;
    if (t.empty() || v != t.back()) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return t;
}

// One panel at height y0; every panel spans the steps [xmin, xmax], so they line up.
std::string draw_panel(const Panel& p, double y0, double xmin, double xmax) {
  double ymin = INFINITY, ymax = -INFINITY;
  for (const auto& s : p.series)
    for (auto [x, y] : s.points) ymin = std::min(ymin, y), ymax = std::max(ymax, y);
  if (xmax == xmin) xmin -= 1, xmax += 1;
  if (ymax == ymin) {
    double d = ymin == 0 ? 1 : std::abs(ymin) * 0.1;
    ymin -= d, ymax += d;
  }
  const double pad = (ymax - ymin) * 0.05;
  ymin -= pad, ymax += pad;
  const double left = kLeft, right = kWidth - kRight, top = y0 + kTop, bottom = y0 + kPanelHeight - kBottom;
  auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * (right - left); };
  auto Y = [&](double y) { return bottom - (y - ymin) / (ymax - ymin) * (bottom - top); };

  std::string o;
  o += "<text x=\"" + fmt(kWidth / 2) + "\" y=\"" + fmt(y0 + 22) +
       "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" + escape(p.title) + "</text>\n";
  o += "<rect x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(right - left) + "\" height=\"" +
       fmt(bottom - top) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (double t : ticks(xmin, xmax)) {
    o += "<line x1=\"" + fmt(X(t)) + "\" y1=\"" + fmt(top) + "\" x2=\"" + fmt(X(t)) + "\" y2=\"" + fmt(bottom) +
         "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + fmt(X(t)) + "\" y=\"" + fmt(bottom + 16) + "\" text-anchor=\"middle\" font-size=\"11\">" +
         fmt(t) + "</text>\n";
  }
  for (double t : ticks(ymin, ymax)) {
    o += "<line x1=\"" + fmt(left) + "\" y1=\"" + fmt(Y(t)) + "\" x2=\"" + fmt(right) + "\" y2=\"" + fmt(Y(t)) +
         "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + fmt(left - 6) + "\" y=\"" + fmt(Y(t) + 4) + "\" text-anchor=\"end\" font-size=\"11\">" +
         fmt(t) + "</text>\n";
  }
  o += "<text x=\"" + fmt((left + right) / 2) + "\" y=\"" + fmt(bottom + 36) +
       "\" text-anchor=\"middle\" font-size=\"12\">step</text>\n";
  double legend_y = top + 14;
  for (const auto& s : p.series) {
    std::string pts;
    for (auto [x, y] : s.points) pts += fmt(X(x)) + "," + fmt(Y(y)) + " ";
    o += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.8\" points=\"" + pts + "\"/>\n";
    for (auto [x, y] : s.points)  // markers: a curve of one point still shows
      if (s.points.size() <= 60)
        o += "<circle cx=\"" + fmt(X(x)) + "\" cy=\"" + fmt(Y(y)) + "\" r=\"2.5\" fill=\"" + s.color + "\"/>\n";
    o += "<text x=\"" + fmt(right - 8) + "\" y=\"" + fmt(legend_y) + "\" text-anchor=\"end\" font-size=\"12\" fill=\"" +
         s.color + "\">" + escape(s.name) + "</text>\n";
    legend_y += 16;
  }
  return o;
}

int run_plot(const std::vector<std::string>& all_args) {
  std::vector<std::string> args = all_args;
  std::string dir;
  if (!args.empty() && args[0].rfind("--", 0) != 0) {
    dir = args[0];
    args.erase(args.begin());
  }
  kiln::cli::Flags flags("plot", {{"output"}}, kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage.c_str());
    return 0;
  }
  KILN_CHECK(!dir.empty(), "plot: expected OUTPUT_DIR, the training run's output_dir (usage: kiln plot OUTPUT_DIR "
             "[--output FILE.svg])");
  const fs::path state_file = fs::path(dir) / "trainer_state.json";
  KILN_CHECK(fs::is_regular_file(state_file), "plot: ", state_file.string(),
             ": no such file (is OUTPUT_DIR a finished run or a checkpoint directory?)");
  const json state = kiln::parse_json(python_floats_as_null(kiln::read_file(state_file)), state_file.string());
  KILN_CHECK(state.is_object() && state.contains("log_history") && state["log_history"].is_array(),
             state_file.string(), ": expected a 'log_history' list");
  const json& history = state["log_history"];

  Points loss, lr;
  std::map<std::string, Points> eval;
  const std::string where = state_file.string() + ": log_history";
  for (const auto& e : history) {
    if (!e.is_object()) continue;
    auto step = kiln::json_value<double>(e, "step", NAN, where);
    if (std::isnan(step)) continue;
    if (e.contains("loss") && e["loss"].is_number()) loss.emplace_back(step, e["loss"].get<double>());
    if (e.contains("learning_rate") && e["learning_rate"].is_number())
      lr.emplace_back(step, e["learning_rate"].get<double>());
    for (const auto& [k, v] : e.items()) {
      if (k.rfind("eval_", 0) != 0 || !v.is_number()) continue;
      if (k == "eval_runtime" || k == "eval_samples" || k == "eval_samples_per_second" || k == "eval_steps_per_second")
        continue;  // speed and size, not a curve worth a panel
      eval[k].emplace_back(step, v.get<double>());
    }
  }
  KILN_CHECK(!loss.empty() || !lr.empty() || !eval.empty(), state_file.string(),
             ": log_history holds no loss, learning_rate or eval_* entries to plot (found ", history.size(),
             " entries; train with --logging_steps N)");

  std::vector<Panel> panels;
  Panel loss_panel{"loss", {}};
  if (!loss.empty()) loss_panel.series.push_back({"train loss", "#1f77b4", loss});
  if (eval.count("eval_loss")) loss_panel.series.push_back({"eval_loss", "#d62728", eval["eval_loss"]});
  if (!loss_panel.series.empty()) panels.push_back(loss_panel);
  if (!lr.empty()) panels.push_back({"learning rate", {{"learning_rate", "#2ca02c", lr}}});
  for (const auto& [k, pts] : eval)
    if (k != "eval_loss") panels.push_back({k, {{k, "#9467bd", pts}}});

  const double height = kPanelHeight * static_cast<double>(panels.size());
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(kWidth) + "\" height=\"" + fmt(height) +
                    "\" viewBox=\"0 0 " + fmt(kWidth) + " " + fmt(height) +
                    "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  double xmin = INFINITY, xmax = -INFINITY;
  for (const auto& p : panels)
    for (const auto& s : p.series) {
      double ymin = INFINITY, ymax = -INFINITY;
      for (auto [x, y] : s.points) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
      // Scaling to the panel divides by the span: 1e308 - (-1e308) is infinite.
      KILN_CHECK(std::isfinite((ymax - ymin) * 1.25), state_file.string(), ": log_history: '", s.name, "' spans [",
                 ymin, ", ", ymax, "], too wide to plot");
    }
  KILN_CHECK(std::isfinite((xmax - xmin) * 1.25), state_file.string(), ": log_history: 'step' spans [", xmin, ", ",
             xmax, "], too wide to plot");
  for (size_t i = 0; i < panels.size(); ++i)
    svg += draw_panel(panels[i], kPanelHeight * static_cast<double>(i), xmin, xmax);
  svg += "</svg>\n";

  const fs::path out = flags.get("output", (fs::path(dir) / "training_curves.svg").string());
  KILN_CHECK(!fs::is_directory(out), "plot: --output ", out.string(), ": is a directory");
  kiln::write_file_atomic(out, svg);
  std::printf("kiln plot: %zu panel(s) -> %s\n", panels.size(), out.string().c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(plot, "draw trainer_state.json's loss, learning-rate and eval curves into an SVG", run_plot);
