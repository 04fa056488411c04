// ByteLevelBpeTokenizer::load: reads a Hugging Face BART/RoBERTa/GPT-2 tokenizer directory.
#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_set>

#include "model/io/lfs_pointer.h"
#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/tokenizer_error.h"
#include "model/tokenizer/tokenizer_files.h"

namespace srformer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// vocab.json, or the "vocab" of tokenizer.json's model (`where` names it in errors): token -> id.
std::unordered_map<std::string, int64_t> parse_vocab(const json& j, const std::string& where) {
  if (!j.is_object()) throw TokenizerLoadError(where + " must be a JSON object mapping tokens to ids");
  std::unordered_map<std::string, int64_t> vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    if (!id.is_number_integer()) {
      throw TokenizerLoadError(where + ": the id of token '" + token + "' is not an integer");
    }
    vocab.emplace(token, id.get<int64_t>());
  }
  return vocab;
}

// One merge, "a b" (merges.txt lines, older tokenizer.json) or ["a", "b"] (newer tokenizer.json).
std::pair<std::string, std::string> parse_merge(const std::string& line, const std::string& where) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string::npos) {
    throw TokenizerLoadError(where + ": expected two tokens separated by one space, got '" + line + "'");
  }
  return {line.substr(0, space), line.substr(space + 1)};
}

std::vector<std::pair<std::string, std::string>> read_merges(const fs::path& file) {
  if (auto pointer = lfs_pointer_message(file)) throw TokenizerLoadError(*pointer);
  std::ifstream in(file);
  if (!in) throw TokenizerLoadError("cannot open " + file.string());
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(parse_merge(line, file.string() + " line " + std::to_string(line_no)));
  }
  return merges;
}

std::vector<std::pair<std::string, std::string>> parse_merges(const json& j, const std::string& where) {
  if (!j.is_array()) throw TokenizerLoadError(where + " must be a JSON array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    const std::string at = where + " entry " + std::to_string(i);
    if (m.is_string()) {
      merges.push_back(parse_merge(m.get<std::string>(), at));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw TokenizerLoadError(at + ": expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

// The vocabulary and merges of a byte-level BPE tokenizer.json (fast-tokenizer-only checkpoints ship
// no vocab.json / merges.txt).
void read_tokenizer_json_model(const json& tj, const fs::path& file, ByteLevelBpeConfig& config) {
  const json& model = tj.contains("model") ? tj["model"] : json();
  const std::string type = model.is_object() ? model.value("type", "") : "";
  if (type != "BPE") {
    throw TokenizerLoadError(file.string() + " holds a " + (type.empty() ? "model of no type" : type + " model") +
                             "; supported are byte-level BPE (BART) and SentencePiece unigram (T5): copy the "
                             "tokenizer files from the base model's repository");
  }
  const json& pre = tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json();
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel") {
    throw TokenizerLoadError(file.string() + " holds a BPE model without byte-level pre-tokenization (pre_tokenizer " +
                             (pre.is_object() ? pre.value("type", "of no type") : pre.dump()) +
                             "; BART/RoBERTa/GPT-2 style has ByteLevel); only byte-level BPE is supported");
  }
  config.vocab = parse_vocab(model.contains("vocab") ? model["vocab"] : json(), file.string() + " model.vocab");
  config.merges = parse_merges(model.contains("merges") ? model["merges"] : json(), file.string() + " model.merges");
}

// Settings of a tokenizer.json that Hugging Face's fast tokenizer applies and GPT-2's scheme here does not:
// refused naming them, whether the file stands alone or beside vocab.json and merges.txt (the fast tokenizer
// reads it there too), rather than tokenizing or decoding otherwise: a pre-tokenizer other than ByteLevel
// (a Sequence splitting digits or with a regex of its own before it, none at all); ByteLevel without its regex encodes
// each added-token-free stretch as one word ("\n\n" one token, not two); a subword prefix or suffix, or
// whole-word lookups before the merges (ignore_merges), change which tokens a word becomes; another decoder
// (WordPiece, Metaspace, ...) other text.
void refuse_settings_it_would_ignore(const json& tj, const fs::path& file) {
  const auto refuse = [&](const std::string& what) {
    throw TokenizerLoadError(file.string() + ": " + what +
                             " is not supported; byte-level BPE here is GPT-2's (ByteLevel pre-tokenizer with "
                             "its regex and decoder, merges alone)");
  };
  const json& pre = tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json();
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel") {
    refuse("pre_tokenizer " + (pre.is_object() ? pre.value("type", "of no type") : pre.dump()));
  }
  if (!pre.value("use_regex", true)) refuse("pre_tokenizer ByteLevel with use_regex false");
  const json& model = tj.contains("model") ? tj["model"] : json();
  if (model.is_object() && model.value("type", "") == "BPE") {
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto it = model.find(key);
      if (it != model.end() && !it->is_null() && *it != "") refuse("model." + std::string(key) + " " + it->dump());
    }
    if (model.value("ignore_merges", false)) refuse("model.ignore_merges true");
  }
  const auto decoder = tj.find("decoder");
  if (decoder != tj.end() && !decoder->is_null()) {
    const std::string type = decoder->is_object() ? decoder->value("type", "") : "";
    if (type != "ByteLevel") refuse("decoder " + (type.empty() ? std::string("of no type") : type));
  }
}

// What a tokenizer.json does around the byte-level BPE that Hugging Face's fast tokenizer would do and we
// must not leave out silently: a normalizer (refused: we apply none), and the post-processor, which
// decides whether <s> ... </s> wrap the ids (RoBERTa/BART processing, or a template of that shape) or
// nothing does (none, or GPT-2's ByteLevel processor). Returns whether to wrap. `id_of`: a token's id
// here, which the processor's own ids for <s> and </s> must be (we write the vocabulary's).
bool read_tokenizer_json_processing(const json& tj, const fs::path& file, const std::string& bos,
                                    const std::string& eos,
                                    const std::function<std::optional<int64_t>(const std::string&)>& id_of) {
  if (const auto it = tj.find("normalizer"); it != tj.end() && !it->is_null()) {
    // A Sequence is named by what it holds ("Sequence of Lowercase, NFKC").
    std::string type = it->is_object() ? it->value("type", std::string("?")) : std::string("?");
    if (type == "Sequence" && it->contains("normalizers") && (*it)["normalizers"].is_array()) {
      std::string inner;
      for (const auto& n : (*it)["normalizers"]) {
        inner += (inner.empty() ? "" : ", ") + (n.is_object() ? n.value("type", std::string("?")) : std::string("?"));
      }
      type += " of " + inner;
    }
    throw TokenizerLoadError(file.string() + " has a normalizer (" + type +
                             ") that this server does not apply, so its ids would differ from Hugging Face's; "
                             "byte-level BPE (BART, RoBERTa, GPT-2) tokenizers have none");
  }
  const auto unsupported = [&](const std::string& what) {
    return TokenizerLoadError(file.string() + ": post_processor " + what +
                              " is not supported; byte-level BPE here wraps the ids in " + bos + " ... " + eos +
                              " (RobertaProcessing, or a TemplateProcessing of that shape) or adds nothing");
  };
  const auto check_id = [&](const std::string& token, const json& ids) {
    if (ids.is_array() && !(ids.size() == 1 && ids[0].is_number_integer() && id_of(token) == ids[0].get<int64_t>())) {
      throw unsupported("giving '" + token + "' the ids " + ids.dump() + " (the vocabulary's: " +
                        (id_of(token) ? std::to_string(*id_of(token)) : std::string("none")) + ")");
    }
  };
  // One processor's answer: true/false to wrap, nullopt when it changes nothing (ByteLevel's offsets).
  std::function<std::optional<bool>(const json&)> wraps = [&](const json& p) -> std::optional<bool> {
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if (type == "ByteLevel") return std::nullopt;
    if (type == "RobertaProcessing" || type == "BertProcessing") {
      const auto token = [&](const char* key) {
        const auto& v = p.contains(key) ? p[key] : json();
        return v.is_array() && !v.empty() && v[0].is_string() ? v[0].get<std::string>() : std::string();
      };
      if (token("cls") != bos || token("sep") != eos) {
        throw unsupported(type + " with cls '" + token("cls") + "' and sep '" + token("sep") + "'");
      }
      for (const char* key : {"cls", "sep"}) {
        if (p[key].size() > 1) check_id(p[key][0].get<std::string>(), json::array({p[key][1]}));
      }
      return true;
    }
    if (type == "TemplateProcessing") {
      std::vector<std::string> items;  // "$A" for the sequence, else the special token
      for (const auto& item : p.contains("single") && p["single"].is_array() ? p["single"] : json::array()) {
        if (item.contains("Sequence")) {
          items.push_back("$A");
        } else if (item.contains("SpecialToken")) {
          items.push_back(item["SpecialToken"].value("id", ""));
        }
      }
      if (items == std::vector<std::string>{"$A"}) return false;
      if (items == std::vector<std::string>{bos, "$A", eos}) {
        const json& specials = p.contains("special_tokens") ? p["special_tokens"] : json::object();
        for (const auto& token : {bos, eos}) {
          if (specials.is_object() && specials.contains(token) && specials[token].contains("ids")) {
            check_id(token, specials[token]["ids"]);
          }
        }
        return true;
      }
      std::string shape;
      for (const auto& i : items) shape += (shape.empty() ? "" : " ") + i;
      throw unsupported("TemplateProcessing '" + shape + "'");
    }
    if (type == "Sequence") {
      std::optional<bool> result;
      for (const auto& inner : p.contains("processors") ? p["processors"] : json::array()) {
        if (const auto w = wraps(inner)) result = w;
      }
      return result;
    }
    throw unsupported(type.empty() ? std::string("of no type") : type);
  };
  const auto it = tj.find("post_processor");
  if (it == tj.end() || it->is_null()) return false;
  return wraps(*it).value_or(false);
}

// A special/added token as the Hugging Face files describe it: a string or {"content", "lstrip", ...}.
struct TokenSpec {
  std::string content;
  std::optional<int64_t> id = std::nullopt;
  bool special = true;
  bool lstrip = false, rstrip = false, single_word = false;
  std::optional<bool> normalized = std::nullopt;  // where the file says; Hugging Face's default: not special
};

std::optional<TokenSpec> parse_token(const json& j, bool special) {
  auto content = token_content(j);
  if (!content) return std::nullopt;
  TokenSpec t{std::move(*content), std::nullopt, special};
  if (j.is_object()) {
    t.special = j.value("special", special);
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    t.single_word = j.value("single_word", false);
    if (j.contains("normalized") && j["normalized"].is_boolean()) t.normalized = j["normalized"].get<bool>();
    if (j.contains("id") && j["id"].is_number_integer()) t.id = j["id"].get<int64_t>();
  }
  return t;
}

// The ids of the added tokens, as Hugging Face's fast tokenizer gives them: a token the vocabulary has keeps
// its id there; any other takes the next id after the vocabulary and the tokens added before it, whatever id
// its entry writes (tokenizers adds tokenizer.json's added_tokens in their order and only warns of another
// id; transformers then adds those of added_tokens_decoder and added_tokens.json it lacks, by their ids).
// An entry's id was taken as it stood: one a vocabulary token has made that token special (dropped from
// summaries) and the added token encoded as it; one past a gap gave ids the model's embedding does not
// have for them. Last, transformers adds the special tokens it has (the roles: bos, eos, unk, sep, pad, cls,
// mask, then additional_special_tokens, `special_order`) that are still missing, at the next ids as well; they
// had none, so a vocabulary without "<s>" and "</s>" wrapped nothing and "<mask>" in text was split up.
std::map<std::string, int64_t> added_token_ids(const std::unordered_map<std::string, int64_t>& vocab,
                                               const std::map<std::string, TokenSpec>& added,
                                               const std::vector<std::string>& tokenizer_json_order,
                                               const std::vector<std::string>& special_order,
                                               const fs::path& model_dir) {
  const auto vocab_size = static_cast<int64_t>(vocab.size());
  std::map<std::string, int64_t> ids;
  int64_t largest = -1;  // of the added tokens so far, vocabulary ones too (as tokenizers' next id counts them)
  std::unordered_set<int64_t> vocab_ids;
  const auto give = [&](const std::string& content) {
    if (ids.count(content) > 0) return;
    int64_t id = 0;
    if (const auto it = vocab.find(content); it != vocab.end()) {
      id = it->second;
    } else {
      id = largest >= vocab_size ? largest + 1 : vocab_size;
      // Only a vocabulary whose ids leave gaps has one at or past its size: Hugging Face would give both
      // tokens the same id.
      if (vocab_ids.empty()) {
        for (const auto& [token, token_id] : vocab) vocab_ids.insert(token_id);
      }
      if (vocab_ids.count(id) > 0) {
        throw TokenizerLoadError(model_dir.string() + ": the added token '" + content +
                                 "' is not in the vocabulary, so it takes the id after the vocabulary's " +
                                 std::to_string(vocab_size) + " tokens and those added before it, " +
                                 std::to_string(id) + ", as Hugging Face gives it; but a vocabulary token has " +
                                 std::to_string(id) + " (its ids leave gaps): restore the tokenizer files");
      }
    }
    ids.emplace(content, id);
    largest = std::max(largest, id);
  };
  for (const auto& content : tokenizer_json_order) give(content);
  std::vector<std::pair<int64_t, std::string>> by_file_id;
  for (const auto& [content, spec] : added) {
    if (spec.id) by_file_id.emplace_back(*spec.id, content);
  }
  std::sort(by_file_id.begin(), by_file_id.end());
  for (const auto& [file_id, content] : by_file_id) give(content);
  for (const auto& content : special_order) give(content);
  for (const auto& [content, spec] : added) {
    if (const auto it = vocab.find(content); it != vocab.end()) ids.emplace(content, it->second);
  }
  return ids;
}

// merges.txt cut short at a line's end still loads, but the tokens only its lost merges build can no
// longer be made, and text splits into smaller pieces than the model saw in training. Every token of a
// trained vocabulary is a byte symbol, a merge's result or an added token; a few more may be filler,
// but over 1% (and 64) unbuildable is a cut file. A vocabulary with no merges at all is bytes only
// (as `srformer init-model` writes one, with filler tokens), not a cut file.
void check_merges_not_cut_short(const ByteLevelBpeConfig& config, const fs::path& merges_file,
                                const fs::path& vocab_file) {
  if (config.merges.empty()) return;
  // Files that do not fit together at all (a symbol or a merge's result missing from the vocabulary)
  // are the tokenizer's to name, more precisely.
  const auto in_vocab = [&](const std::string& token) { return config.vocab.count(token) > 0; };
  std::unordered_set<std::string> buildable;
  for (const auto& symbol : byte_level_symbols()) {
    if (!in_vocab(symbol)) return;
    buildable.insert(symbol);
  }
  for (const auto& [left, right] : config.merges) {
    if (!in_vocab(left + right)) return;
    buildable.insert(left + right);
  }
  for (const auto& added : config.added_tokens) buildable.insert(added.content);
  size_t unbuildable = 0;
  const std::pair<const std::string, int64_t>* first = nullptr;
  for (const auto& entry : config.vocab) {
    if (buildable.count(entry.first) > 0) continue;
    ++unbuildable;
    if (first == nullptr || entry.second < first->second) first = &entry;
  }
  if (unbuildable <= std::max<size_t>(64, config.vocab.size() / 100)) return;
  // No advice here: load_tokenizer (a user's model) adds "download it again".
  throw TokenizerFileCutShortError(merges_file.string() + " holds " + std::to_string(config.merges.size()) +
                                   " merges, but " + std::to_string(unbuildable) + " of the " +
                                   std::to_string(config.vocab.size()) + " tokens of " + vocab_file.string() +
                                   " are built by none of them (the first is '" + first->first + "', id " +
                                   std::to_string(first->second) + "): merges.txt looks cut short");
}

}  // namespace

std::unique_ptr<ByteLevelBpeTokenizer> ByteLevelBpeTokenizer::load(const fs::path& model_dir,
                                                                   const nlohmann::json* parsed_tokenizer_json) {
  const auto vocab_file = model_dir / "vocab.json", merges_file = model_dir / "merges.txt";
  std::optional<json> read_here;
  const json* const tokenizer_json = tokenizer_json_of(model_dir, parsed_tokenizer_json, read_here);
  ByteLevelBpeConfig config;
  const bool from_merges_txt = fs::exists(vocab_file) || fs::exists(merges_file) || !tokenizer_json;
  if (from_merges_txt) {
    for (const auto& f : {vocab_file, merges_file}) {
      if (!fs::exists(f)) {
        throw TokenizerLoadError("byte-level BPE tokenizer needs vocab.json and merges.txt (or tokenizer.json): " +
                                 f.string() + " does not exist");
      }
    }
    config.vocab = parse_vocab(read_tokenizer_file(vocab_file), vocab_file.string());
    config.merges = read_merges(merges_file);
  } else {
    read_tokenizer_json_model(*tokenizer_json, model_dir / "tokenizer.json", config);
  }

  // Role -> token; BART/RoBERTa defaults, <mask> swallowing the space before it as they do.
  std::map<std::string, TokenSpec> roles = {
      {"bos_token", {"<s>"}},   {"eos_token", {"</s>"}}, {"unk_token", {"<unk>"}},   {"sep_token", {"</s>"}},
      {"pad_token", {"<pad>"}}, {"cls_token", {"<s>"}},  {"mask_token", {"<mask>"}},
  };
  roles["mask_token"].lstrip = true;
  std::map<std::string, TokenSpec> added;         // content -> spec (later files override earlier ones)
  std::vector<std::string> tokenizer_json_order;  // tokenizer.json's added_tokens, in its order
  std::vector<std::string> listed_specials;       // additional_special_tokens, in the files' order
  std::set<std::string> unset_roles;              // those a file sets to null: transformers then has none
  const auto add = [&](const TokenSpec& t) {
    auto& slot = added[t.content];
    const auto id = t.id ? t.id : slot.id;
    const auto normalized = t.normalized ? t.normalized : slot.normalized;
    slot = t;
    slot.id = id;
    slot.normalized = normalized;
  };

  if (const auto& tj = tokenizer_json) {
    if (tj->contains("added_tokens") && (*tj)["added_tokens"].is_array()) {
      for (const auto& a : (*tj)["added_tokens"]) {
        if (auto t = parse_token(a, false)) {
          add(*t);
          tokenizer_json_order.push_back(t->content);
        }
      }
    }
    const json& pre = tj->contains("pre_tokenizer") ? (*tj)["pre_tokenizer"] : json();
    if (pre.is_object() && pre.value("type", "") == "ByteLevel")
      config.add_prefix_space = pre.value("add_prefix_space", false);
  }
  for (const auto& [content, id] : read_added_tokens_json(model_dir)) add({content, id, false});
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const auto j = read_tokenizer_file_if_present(model_dir / name);
    if (!j || !j->is_object()) continue;
    for (auto& [role, spec] : roles) {
      if (j->contains(role)) {
        if ((*j)[role].is_null()) unset_roles.insert(role);
        if (auto t = parse_token((*j)[role], true)) {
          unset_roles.erase(role);
          // BART/RoBERTa give a plain-string <mask> lstrip (as their slow tokenizers do).
          if (role == "mask_token" && (*j)[role].is_string()) t->lstrip = true;
          spec = *t;
        }
      }
    }
    for (const auto* a : listed_special_tokens(*j)) {
      if (auto t = parse_token(*a, true)) {
        add(*t);
        listed_specials.push_back(t->content);
      }
    }
    for (const auto& [id, a] : added_tokens_decoder(*j, model_dir / name)) {
      if (auto t = parse_token(*a, false)) {
        t->id = id;
        add(*t);
      }
    }
    if (j->contains("add_prefix_space") && (*j)["add_prefix_space"].is_boolean()) {
      config.add_prefix_space = (*j)["add_prefix_space"].get<bool>();
    }
  }
  for (const auto& [role, spec] : roles) {
    TokenSpec t = spec;
    t.special = true;
    if (const auto it = added.find(t.content); it != added.end()) {
      t.id = it->second.id;
      t.lstrip = t.lstrip || it->second.lstrip;
      t.rstrip = t.rstrip || it->second.rstrip;
      t.single_word = t.single_word || it->second.single_word;
      if (it->second.normalized) t.normalized = it->second.normalized;
    }
    add(t);
  }
  config.bos_token = roles["bos_token"].content;
  config.eos_token = roles["eos_token"].content;
  config.pad_token = roles["pad_token"].content;
  config.unk_token = roles["unk_token"].content;

  std::vector<std::string> special_order;  // transformers' SPECIAL_TOKENS_ATTRIBUTES order
  for (const char* role :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (unset_roles.count(role) == 0) special_order.push_back(roles[role].content);
  }
  special_order.insert(special_order.end(), listed_specials.begin(), listed_specials.end());
  const auto ids = added_token_ids(config.vocab, added, tokenizer_json_order, special_order, model_dir);
  for (const auto& [content, spec] : added) {
    const auto id = ids.find(content);
    if (id == ids.end()) continue;  // a role token this vocabulary does not have
    config.added_tokens.push_back({content, id->second, spec.special, spec.lstrip, spec.rstrip, spec.single_word,
                                   spec.normalized.value_or(!spec.special)});
  }
  if (tokenizer_json) {
    refuse_settings_it_would_ignore(*tokenizer_json, model_dir / "tokenizer.json");
    const auto id_of = [&](const std::string& token) -> std::optional<int64_t> {
      for (const auto& a : config.added_tokens) {
        if (a.content == token) return a.id;
      }
      const auto it = config.vocab.find(token);
      return it == config.vocab.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    config.add_bos_eos = read_tokenizer_json_processing(*tokenizer_json, model_dir / "tokenizer.json", config.bos_token,
                                                        config.eos_token, id_of);
  }
  if (from_merges_txt) check_merges_not_cut_short(config, merges_file, vocab_file);
  try {
    return std::make_unique<ByteLevelBpeTokenizer>(std::move(config));
  } catch (const std::invalid_argument& e) {
    throw TokenizerLoadError("cannot load the byte-level BPE tokenizer in " + model_dir.string() + ": " + e.what());
  }
}

}  // namespace srformer
