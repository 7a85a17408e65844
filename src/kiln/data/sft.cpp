#include "kiln/data/sft.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::data {

using nlohmann::ordered_json;

const char* sft_format_name(SftFormat f) {
  switch (f) {
    case SftFormat::Language: return "language modeling";
    case SftFormat::Conversational: return "conversational";
    case SftFormat::PromptCompletion: return "prompt-completion";
    case SftFormat::ConversationalPromptCompletion: return "conversational prompt-completion";
  }
  return "";
}

namespace {

// TRL's is_conversational for one value: a list whose first item is an object with a "role".
bool is_messages(const ordered_json& v) {
  return v.is_array() && !v.empty() && v[0].is_object() && v[0].contains("role");
}

// TRL's maybe_convert_to_chatml: ShareGPT's "conversations" of {"from", "value"} become "messages" of
// {"role", "content"} (human -> user, gpt -> assistant; other roles kept).
ordered_json chatml_messages(const ordered_json& conversations, const std::string& where) {
  KILN_CHECK(conversations.is_array(), where, ": 'conversations' must be a list of {\"from\", \"value\"} turns, got ",
             json_found(conversations));
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < conversations.size(); ++i) {
    const ordered_json& turn = conversations[i];
    const std::string at = detail::concat(where, ": conversations[", i, "]");
    KILN_CHECK(turn.is_object() && turn.contains("from") && turn["from"].is_string() && turn.contains("value"), at,
               ": expected {\"from\": ROLE, \"value\": TEXT}, got ", json_found(turn));
    std::string role = turn["from"].get<std::string>();
    if (role == "human") role = "user";
    else if (role == "gpt") role = "assistant";
    out.push_back({{"role", role}, {"content", turn["value"]}});
  }
  return out;
}

// The row's messages under `key` ("messages", "prompt", "completion"), checked.
ordered_json messages_of(const ordered_json& row, const char* key, const std::string& where) {
  if (std::string(key) == "messages" && !row.contains("messages") && row.contains("conversations"))
    return chatml_messages(row["conversations"], where);
  KILN_CHECK(row.contains(key), where, ": missing key '", key, "' (the first row's format, ",
             "every row must have it)");
  const ordered_json& v = row[key];
  KILN_CHECK(v.is_array(), where, ": '", key, "' must be a list of {\"role\", \"content\"} messages, got ",
             json_found(v));
  tokenizers::check_messages(v, detail::concat(where, ": '", key, "'"));
  return v;
}

std::string string_of(const ordered_json& row, const std::string& key, const std::string& where) {
  auto it = row.find(key);
  KILN_CHECK(it != row.end(), where, ": missing key '", key, "' (the first row's format, every row must have it)");
  KILN_CHECK(it->is_string(), where, ": '", key, "' must be a string (or, in every row, a list of messages), got ",
             json_found(*it));
  return it->get<std::string>();
}

std::vector<int64_t> ids_of(const tokenizers::Encoding& e) { return {e.ids.begin(), e.ids.end()}; }

// The rendering's ids, and its assistant mask when asked (transformers' apply_chat_template(tokenize=True)).
// A template error names the row it rendered (a content of null or a number fails in the template).
std::vector<int64_t> chat_ids(const tokenizers::ChatTemplate& chat, const tokenizers::Tokenizer& tok,
                              const ordered_json& messages, bool add_generation_prompt,
                              std::vector<int64_t>* assistant_mask, const std::string& where) {
  tokenizers::ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  tokenizers::ChatRendering r;
  try {
    r = chat.render(messages, o);
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": rendering the chat template: ", e.what()));
  }
  tokenizers::Encoding e = tok.encode(r.text, false);
  if (assistant_mask) *assistant_mask = tokenizers::assistant_tokens_mask(e, r.generation_spans);
  return ids_of(e);
}

struct Tokenized {
  std::vector<int64_t> ids, assistant_mask, completion_mask;  // masks empty when not made
};

Tokenized tokenize_row(const ordered_json& row, SftFormat format, const tokenizers::Tokenizer& tok,
                       const tokenizers::ChatTemplate* chat, const SftOptions& o, const std::string& where,
                       SftStats& stats) {
  Tokenized t;
  auto* mask = o.assistant_only_loss ? &t.assistant_mask : nullptr;
  auto add_eos = [&](std::string s) { return s.ends_with(o.eos_token) ? s : s + o.eos_token; };
  std::vector<int64_t> prompt;
  switch (format) {
    case SftFormat::Language:
      t.ids = ids_of(tok.encode(add_eos(string_of(row, o.text_column, where)), true));
      return t;
    case SftFormat::Conversational:
      t.ids = chat_ids(*chat, tok, messages_of(row, "messages", where), false, mask, where);
      return t;
    case SftFormat::ConversationalPromptCompletion: {
      ordered_json p = messages_of(row, "prompt", where), all = p;
      for (const auto& m : messages_of(row, "completion", where)) all.push_back(m);
      prompt = chat_ids(*chat, tok, p, true, nullptr, where);
      t.ids = chat_ids(*chat, tok, all, false, mask, where);
      break;
    }
    case SftFormat::PromptCompletion: {
      const std::string p = string_of(row, "prompt", where);
      prompt = ids_of(tok.encode(p, true));
      t.ids = ids_of(tok.encode(p + add_eos(string_of(row, "completion", where)), true));
      break;
    }
  }
  if (prompt.size() > t.ids.size() || !std::equal(prompt.begin(), prompt.end(), t.ids.begin())) ++stats.prefix_mismatches;
  t.completion_mask.assign(t.ids.size(), 1);
  std::fill_n(t.completion_mask.begin(), std::min(prompt.size(), t.ids.size()), 0);
  return t;
}

}  // namespace

SftFormat detect_sft_format(const JsonRows& rows, const std::string& text_column) {
  KILN_CHECK(!rows.objects.empty(), "sft: no rows");
  const ordered_json& first = rows.objects[0];
  const std::string& where = rows.where[0];
  if (first.contains("prompt")) {
    KILN_CHECK(first.contains("completion"), where, ": a 'prompt' without a 'completion' (prompt-completion rows ",
               "have both)");
    const bool p = is_messages(first["prompt"]), c = is_messages(first["completion"]);
    KILN_CHECK(p == c, where, ": 'prompt' and 'completion' must both be strings or both lists of messages, got ",
               json_found(first["prompt"]), " and ", json_found(first["completion"]));
    return p ? SftFormat::ConversationalPromptCompletion : SftFormat::PromptCompletion;
  }
  if (first.contains("messages") || first.contains("conversations")) return SftFormat::Conversational;
  KILN_CHECK(first.contains(text_column), where, ": no SFT data: expected 'messages' (conversations), 'prompt' and ",
             "'completion', or the text column '", text_column, "'");
  return SftFormat::Language;
}

bool looks_like_sft_data(const JsonRows& rows) {
  if (rows.objects.empty()) return false;
  const ordered_json& first = rows.objects[0];
  return (first.contains("prompt") && first.contains("completion")) ||
         (first.contains("messages") && is_messages(first["messages"])) || first.contains("conversations");
}

bool has_label(const Features& f) {
  for (size_t r = 0; r < f.token_labels.size(); ++r) {
    const auto& labels = f.token_labels[r];
    const std::vector<int64_t> whole{static_cast<int64_t>(labels.size())};
    size_t start = 0;
    for (int64_t n : r < f.seq_lengths.size() ? f.seq_lengths[r] : whole) {
      for (size_t i = start + 1; i < start + static_cast<size_t>(n) && i < labels.size(); ++i)
        if (labels[i] != -100) return true;
      start += static_cast<size_t>(n);
    }
  }
  return false;
}

Features tokenize_sft(const JsonRows& rows, const tokenizers::Tokenizer& tok, const tokenizers::ChatTemplate* chat,
                      const SftOptions& o, SftStats* stats_out) {
  const SftFormat format = detect_sft_format(rows, o.text_column);
  const bool conversational =
      format == SftFormat::Conversational || format == SftFormat::ConversationalPromptCompletion;
  const std::string file = rows.where[0].substr(0, rows.where[0].rfind(':'));
  KILN_CHECK(!o.assistant_only_loss || conversational, file, ": --assistant_only_loss is for conversational data ",
             "('messages', or prompt and completion as lists of messages); this file is ", sft_format_name(format));
  KILN_CHECK(!conversational || chat, file, ": ", sft_format_name(format), " data needs the tokenizer's chat template");
  KILN_CHECK(!o.assistant_only_loss || chat->has_generation_blocks(), "--assistant_only_loss: the chat template ",
             chat->origin(), " has no {% generation %} blocks, so no token is known to be the assistant's; use a ",
             "template that marks the assistant's turns with {% generation %} ... {% endgeneration %}");
  const bool completion_only =
      o.completion_only_loss.value_or(format == SftFormat::PromptCompletion ||
                                      format == SftFormat::ConversationalPromptCompletion);
  SftStats stats;
  Features f;
  for (size_t r = 0; r < rows.objects.size(); ++r) {
    const std::string& where = rows.where[r];
    Tokenized t = tokenize_row(rows.objects[r], format, tok, chat, o, where, stats);
    if (o.assistant_only_loss)
      KILN_CHECK(std::find(t.assistant_mask.begin(), t.assistant_mask.end(), 1) != t.assistant_mask.end(), where,
                 ": --assistant_only_loss, but this example has no assistant tokens (no {% generation %} block of ",
                 chat->origin(), " rendered any)");
    std::vector<int64_t> labels = t.ids;
    for (size_t i = 0; i < labels.size(); ++i)
      if ((completion_only && !t.completion_mask.empty() && !t.completion_mask[i]) ||
          (!t.assistant_mask.empty() && !t.assistant_mask[i]))
        labels[i] = -100;
    if (o.max_length > 0 && !o.packing && static_cast<int64_t>(t.ids.size()) > o.max_length) {
      t.ids.resize(static_cast<size_t>(o.max_length));
      labels.resize(static_cast<size_t>(o.max_length));
    }
    if (!o.packing && std::all_of(labels.begin(), labels.end(), [](int64_t y) { return y == -100; })) {
      ++stats.dropped;  // TRL drops what truncation left without a label
      continue;
    }
    f.input_ids.push_back(std::move(t.ids));
    f.token_labels.push_back(std::move(labels));
  }
  stats.rows = f.size();
  KILN_CHECK(f.size() > 0, file, ": no example left with a token to train on (", stats.dropped,
             " without a label: empty, masked, or cut by truncation to ", o.max_length, " tokens)");
  KILN_CHECK(has_label(f), file, ": no example has a token to train on (every label is masked, the rows are ",
             "empty, or they hold one token: the first token of an example is never a target)");
  if (stats_out) *stats_out = stats;
  return f;
}

const char* packing_strategy_name(PackingStrategy s) {
  switch (s) {
    case PackingStrategy::Bfd: return "bfd";
    case PackingStrategy::BfdSplit: return "bfd_split";
    case PackingStrategy::Wrapped: return "wrapped";
  }
  return "";
}

PackingStrategy parse_packing_strategy(const std::string& name) {
  for (PackingStrategy s : {PackingStrategy::Bfd, PackingStrategy::BfdSplit, PackingStrategy::Wrapped})
    if (name == packing_strategy_name(s)) return s;
  throw Error("packing_strategy must be one of bfd, bfd_split, wrapped (TRL's), got '" + name + "'");
}

namespace {

// datasets.Dataset.map's default batch_size: TRL's pack_dataset packs each batch of rows apart.
constexpr size_t kMapBatch = 1000;

// Tokens [begin, end) of row `row`: an example, or with bfd_split a fragment of one.
struct Piece {
  size_t row;
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

// Best-fit decreasing (TRL's _pack_bfd): the longest piece first (ties in order), each into the fullest row it
// fits, else a new row; the rows appended to `out` with their pieces' lengths.
void pack_bfd(const Features& rows, std::vector<Piece> pieces, int64_t max_length, Features& out) {
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.size() > b.size(); });
  struct Bin {
    std::vector<size_t> pieces;
    int64_t length = 0;
  };
  std::vector<Bin> bins;
  std::map<int64_t, std::deque<size_t>> by_space;  // the bins with each amount of room left, oldest first
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t n = pieces[i].size();
    auto it = by_space.lower_bound(n);  // the fullest bin it fits (TRL's segment tree search)
    size_t bin;
    if (it == by_space.end()) {
      bin = bins.size();
      bins.emplace_back();
    } else {
      bin = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) by_space.erase(it);
    }
    bins[bin].pieces.push_back(i);
    bins[bin].length += n;
    if (bins[bin].length < max_length) by_space[max_length - bins[bin].length].push_back(bin);
  }
  for (const Bin& b : bins) {
    std::vector<int64_t> ids, labels, lengths;
    for (size_t i : b.pieces) {
      const Piece& x = pieces[i];
      ids.insert(ids.end(), rows.input_ids[x.row].begin() + x.begin, rows.input_ids[x.row].begin() + x.end);
      labels.insert(labels.end(), rows.token_labels[x.row].begin() + x.begin, rows.token_labels[x.row].begin() + x.end);
      lengths.push_back(x.size());
    }
    out.input_ids.push_back(std::move(ids));
    out.token_labels.push_back(std::move(labels));
    out.seq_lengths.push_back(std::move(lengths));
  }
}

// TRL's _pack_wrapped: rows [first, last) one after another, cut every max_length tokens; each row one sequence.
void pack_wrapped(const Features& rows, size_t first, size_t last, int64_t max_length, Features& out) {
  std::vector<int64_t> ids, labels;
  for (size_t r = first; r < last; ++r) {
    ids.insert(ids.end(), rows.input_ids[r].begin(), rows.input_ids[r].end());
    labels.insert(labels.end(), rows.token_labels[r].begin(), rows.token_labels[r].end());
  }
  for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(max_length)) {
    const size_t end = std::min(ids.size(), at + static_cast<size_t>(max_length));
    out.input_ids.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(end));
    out.token_labels.emplace_back(labels.begin() + static_cast<std::ptrdiff_t>(at),
                                  labels.begin() + static_cast<std::ptrdiff_t>(end));
  }
}

}  // namespace

Features pack_sft(const Features& rows, int64_t max_length, PackingStrategy strategy) {
  KILN_CHECK(max_length > 0, "packing needs a max_length > 0");
  KILN_CHECK(rows.token_labels.size() == rows.input_ids.size(), "packing: ", rows.input_ids.size(), " rows of ids and ",
             rows.token_labels.size(), " of labels");
  Features out;
  for (size_t first = 0; first < rows.size(); first += kMapBatch) {
    const size_t last = std::min(rows.size(), first + kMapBatch);
    if (strategy == PackingStrategy::Wrapped) {
      pack_wrapped(rows, first, last, max_length, out);
      continue;
    }
    std::vector<Piece> pieces;
    for (size_t r = first; r < last; ++r) {  // (TRL filters out empty sequences)
      const auto n = static_cast<int64_t>(rows.input_ids[r].size());
      if (strategy == PackingStrategy::Bfd && n > 0) pieces.push_back({r, 0, std::min(n, max_length)});
      for (int64_t at = 0; strategy == PackingStrategy::BfdSplit && at < n; at += max_length)
        pieces.push_back({r, at, std::min(n, at + max_length)});
    }
    pack_bfd(rows, std::move(pieces), max_length, out);
  }
  return out;
}

}  // namespace kiln::data
