#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "model/io/lfs_pointer.h"
#include "model/tokenizer/protobuf_wire.h"
#include "model/tokenizer/tokenizer_error.h"
#include "model/tokenizer/tokenizer_files.h"
#include "model/tokenizer/unigram_tokenizer_json.h"
#include "model/tokenizer/utf8.h"

namespace srformer {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's whitespace symbol

// Highest N + 1 over the <extra_id_N> strings found anywhere in j (keys or values), 0 when none.
int64_t count_extra_ids(const nlohmann::json& j) {
  // Nine digits at most: more is past any count (kMaxExtraIds refuses it), and std::stoll's range.
  static const std::regex kExtra(R"(<extra_id_(\d{1,9})>)");
  int64_t best = 0;
  const auto consider = [&](const std::string& s) {
    std::smatch m;
    if (std::regex_match(s, m, kExtra)) best = std::max<int64_t>(best, std::stoll(m[1].str()) + 1);
  };
  if (j.is_string()) {
    consider(j.get<std::string>());
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      consider(key);
      best = std::max(best, count_extra_ids(value));
    }
  } else if (j.is_array()) {
    for (const auto& value : j) best = std::max(best, count_extra_ids(value));
  }
  return best;
}

std::optional<int64_t> valid_id(int32_t id) { return id >= 0 ? std::optional<int64_t>(id) : std::nullopt; }

// A special token's name in tokenizer_config.json or special_tokens_map.json, where it has one.
void read_token_name(const nlohmann::json& j, const char* role, std::string& name) {
  if (!j.is_object() || !j.contains(role)) return;
  if (auto content = token_content(j[role])) name = std::move(*content);
}

// Tokens a checkpoint added (added_tokens.json's {content: id}, tokenizer_config.json's
// added_tokens_decoder and tokenizer.json's added_tokens) with the ids their entries write, in the order
// Hugging Face's fast tokenizer adds them: tokenizer.json's in its order, then the others by id. Those of
// added_tokens.json alone are special where additional_special_tokens (or extra_special_tokens) lists them. The
// caller keeps those past the sentinels.
std::vector<AddedToken> listed_added_tokens(const fs::path& model_dir, const nlohmann::json* tokenizer_json,
                                            const std::optional<nlohmann::json>& config) {
  std::map<int64_t, AddedToken> out;
  std::set<std::string> special_names;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    const auto j = read_tokenizer_file_if_present(model_dir / name);
    if (!j) continue;
    for (const auto* t : listed_special_tokens(*j)) {
      if (auto content = token_content(*t)) special_names.insert(*content);
    }
  }
  for (const auto& [content, id] : read_added_tokens_json(model_dir)) {
    out[id] = {content, id, special_names.count(content) > 0};
  }
  const auto take = [&](int64_t id, const nlohmann::json& t) {
    auto content = token_content(t);
    if (!content) return;
    AddedToken a{*content, id, t.is_object() ? t.value("special", special_names.count(*content) > 0) : false};
    if (t.is_object()) {
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
    }
    out[id] = std::move(a);
  };
  if (config) {
    for (const auto& [id, t] : added_tokens_decoder(*config, model_dir / "tokenizer_config.json")) take(id, *t);
  }
  std::vector<int64_t> first;  // tokenizer.json's ids, in its order
  if (tokenizer_json && tokenizer_json->contains("added_tokens") && (*tokenizer_json)["added_tokens"].is_array()) {
    for (const auto& t : (*tokenizer_json)["added_tokens"]) {
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer()) {
        take(t["id"].get<int64_t>(), t);
        first.push_back(t["id"].get<int64_t>());
      }
    }
  }
  std::vector<AddedToken> ordered;
  for (const int64_t id : first) {
    if (const auto it = out.find(id); it != out.end()) {
      ordered.push_back(std::move(it->second));
      out.erase(it);
    }
  }
  for (auto& [id, token] : out) ordered.push_back(std::move(token));
  return ordered;
}

// The serialized model without SentencePiece's dummy prefix. Protobuf merges an embedded message
// that comes twice, so a second NormalizerSpec (ModelProto field 3) holding only add_dummy_prefix
// (its field 3) = false overrides that one setting and keeps the rest.
SentencePieceProcessor load_with_dummy_prefix(std::string serialized, bool prefix) {
  std::string spec;
  wire::put_bool(spec, 3, prefix);
  wire::put_bytes(serialized, 3, spec);
  return SentencePieceProcessor::load_from_bytes(serialized);
}
SentencePieceProcessor load_unprefixed(std::string serialized) {
  return load_with_dummy_prefix(std::move(serialized), false);
}

std::string read_binary_file(const fs::path& file) {
  if (!fs::is_regular_file(file)) {
    throw TokenizerLoadError(file.string() + " is not a regular file (" +
                             (fs::is_directory(file) ? "a directory" : "a device, socket or pipe") +
                             "); it must be the SentencePiece model file");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw TokenizerLoadError("cannot read " + file.string() + ": " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in) throw TokenizerLoadError("cannot read " + file.string());
  return bytes.str();
}

// spm_train writes the pieces (ModelProto field 1) first, then trainer_spec (2) and normalizer_spec (3).
// A file cut short at a piece's end still parses, but then SentencePiece falls back to default
// special ids and no normalization, and the model writes nonsense without a word of error.
void check_not_cut_short(std::string_view serialized, const fs::path& file) {
  if (serialized.empty()) throw TokenizerFileCutShortError(file.string() + " is empty (0 bytes)");
  const auto fields = wire::top_level_fields(serialized);
  if (!fields) {
    throw TokenizerFileCutShortError(file.string() +
                                     " is not a SentencePiece model: its protobuf encoding breaks off or is "
                                     "corrupt (" +
                                     std::to_string(serialized.size()) + " bytes, cut short?)");
  }
  const auto count = [&](int number) {
    return std::count_if(fields->begin(), fields->end(), [&](const wire::Field& f) { return f.number == number; });
  };
  const bool trainer = count(2) > 0;
  const bool normalizer = count(3) > 0;
  if (trainer && normalizer) return;
  const auto pieces = count(1);
  throw TokenizerFileCutShortError(file.string() + " holds " + std::to_string(pieces) + " pieces but no " +
                                   (trainer      ? "normalizer_spec"
                                    : normalizer ? "trainer_spec"
                                                 : "trainer_spec or normalizer_spec") +
                                   ", which every model SentencePiece's trainer writes has: the file (" +
                                   std::to_string(serialized.size()) + " bytes) looks cut short");
}

// Hugging Face's "first" prepend scheme for a directory with spiece.model: its tokenizer.json says so
// where it has one (what the fast tokenizer runs), else tokenizer_config.json's "legacy": false (what
// T5Tokenizer and its conversion to the fast one follow).
// `tokenizer_json`: the directory's, nullptr where it has none.
bool prefixes_first_only(const nlohmann::json* tokenizer_json, const std::optional<nlohmann::json>& config) {
  if (tokenizer_json != nullptr) return metaspace_prefixes_first_only(*tokenizer_json);
  return config && config->contains("legacy") && (*config)["legacy"] == false;
}

// The tokens of `listed` (listed_added_tokens) past the pieces of `sp` and its `n` sentinels, with the ids Hugging
// Face's fast tokenizer gives them; throws TokenizerLoadError for one listed with the id of a piece or sentinel
// that is something else. `in_vocabulary` gets those listed with the id of their piece or sentinel (their lstrip,
// rstrip and single_word are Hugging Face's for it).
std::vector<AddedToken> tokens_after_the_sentinels(const std::vector<AddedToken>& listed,
                                                   const SentencePieceProcessor& sp, int64_t n,
                                                   const fs::path& model_dir, std::vector<AddedToken>& in_vocabulary) {
  std::vector<AddedToken> added;
  const int64_t base = sp.vocab_size() + n;
  for (const auto& token : listed) {
    const int64_t id = token.id;
    if (id >= base) {
      // Hugging Face's fast tokenizer (AutoTokenizer's) gives a token the vocabulary lacks the next id after the
      // vocabulary and the tokens added before it, whatever id its entry writes (tokenizers only warns): past a
      // gap it is the first free one. A token listed twice keeps its first id, one the vocabulary has its id there.
      const bool seen =
          std::any_of(added.begin(), added.end(), [&](const AddedToken& a) { return a.content == token.content; });
      const int64_t sentinel = count_extra_ids(nlohmann::json(token.content));  // N + 1 for "<extra_id_N>"
      const bool in_vocabulary =
          sp.id_to_piece(sp.piece_to_id(token.content)) == token.content || (sentinel > 0 && sentinel <= n);
      if (!seen && !in_vocabulary) {
        added.push_back(token);
        added.back().id = base + static_cast<int64_t>(added.size()) - 1;
      }
      continue;
    }
    // The rest name pieces or sentinels, as Hugging Face lists every special token: they must be those.
    const std::string here = id < 0                 ? std::string("outside the vocabulary")
                             : id < sp.vocab_size() ? "'" + sp.id_to_piece(static_cast<int32_t>(id)) + "'"
                                                    : "'<extra_id_" + std::to_string(base - 1 - id) + ">'";
    if (id < 0 || here != "'" + token.content + "'") {
      throw TokenizerLoadError(model_dir.string() + ": the tokenizer files give '" + token.content + "' the id " +
                               std::to_string(id) + ", which is " + here +
                               " in spiece.model and the sentinels; correct the files (added_tokens.json, "
                               "tokenizer_config.json's added_tokens_decoder)");
    }
    in_vocabulary.push_back(token);
  }
  return added;
}

// A fast-tokenizer-only checkpoint: the SentencePiece model its tokenizer.json was converted from.
std::unique_ptr<SentencePieceTokenizer> load_from_tokenizer_json(const fs::path& model_dir,
                                                                 const nlohmann::json* parsed_tokenizer_json) {
  const auto file = model_dir / "tokenizer.json";
  std::optional<nlohmann::json> read_here;
  const nlohmann::json* const tj = tokenizer_json_of(model_dir, parsed_tokenizer_json, read_here);
  if (!tj || !is_unigram_tokenizer_json(*tj)) {
    throw TokenizerLoadError("no SentencePiece model: " + (model_dir / "spiece.model").string() +
                             " does not exist and " + file.string() + (tj ? " holds no Unigram model" : " neither") +
                             "; copy spiece.model from the model's repository");
  }
  SpecialTokenNames names;
  for (const char* config : {"special_tokens_map.json", "tokenizer_config.json"}) {
    if (const auto j = read_tokenizer_file_if_present(model_dir / config)) {
      read_token_name(*j, "eos_token", names.eos);
      read_token_name(*j, "pad_token", names.pad);
      read_token_name(*j, "bos_token", names.bos);
    }
  }
  const auto converted = sentencepiece_model_from_tokenizer_json(*tj, file.string(), names);
  // "never": text that starts with whitespace goes through the model with the dummy prefix.
  const bool never = metaspace_never_prefixes(*tj);
  const auto listed =
      listed_added_tokens(model_dir, tj, read_tokenizer_file_if_present(model_dir / "tokenizer_config.json"));
  try {
    auto sp = never ? load_with_dummy_prefix(converted.model_proto, true)
                    : SentencePieceProcessor::load_from_bytes(converted.model_proto);
    std::vector<AddedToken> in_vocabulary;
    auto added = tokens_after_the_sentinels(listed, sp, converted.extra_ids, model_dir, in_vocabulary);
    return std::make_unique<SentencePieceTokenizer>(
        std::move(sp), converted.extra_ids,
        converted.prefix_first_only || never ? std::optional(load_unprefixed(converted.model_proto)) : std::nullopt,
        std::move(added), metaspace_decoder_keeps_first_space(*tj), metaspace_keeps_trailing_space(*tj), never,
        unicode_whitespace_handling(*tj),
        converted.prefix_first_only || never ? std::nullopt : std::optional(load_unprefixed(converted.model_proto)),
        std::move(in_vocabulary));
  } catch (const TokenizerLoadError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw TokenizerLoadError(model_dir.string() + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw TokenizerLoadError("cannot load the SentencePiece model of " + file.string() + ": " + e.what());
  }
}

}  // namespace

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const fs::path& model_dir,
                                                                     const nlohmann::json* parsed_tokenizer_json) {
  const auto model_file = model_dir / "spiece.model";
  if (!fs::exists(model_file)) return load_from_tokenizer_json(model_dir, parsed_tokenizer_json);
  std::optional<int64_t> extra_ids;
  int64_t listed = 0;
  const auto config = read_tokenizer_file_if_present(model_dir / "tokenizer_config.json");
  if (config) {
    if (config->contains("extra_ids") && (*config)["extra_ids"].is_number_integer()) {
      extra_ids = (*config)["extra_ids"].get<int64_t>();
    }
    listed = std::max(listed, count_extra_ids(*config));
  }
  for (const char* name : {"special_tokens_map.json", "added_tokens.json"}) {
    if (const auto j = read_tokenizer_file_if_present(model_dir / name)) listed = std::max(listed, count_extra_ids(*j));
  }
  int64_t n = kDefaultExtraIds;
  if (extra_ids && *extra_ids > 0) {
    n = std::max(*extra_ids, listed);
  } else if (listed > 0) {
    n = listed;
  } else if (extra_ids) {
    n = 0;
  }
  // Each sentinel becomes a special token matched in every document: a typo's million would take
  // gigabytes and minutes before the first request.
  if (n > kMaxExtraIds) {
    throw TokenizerLoadError(model_dir.string() + ": the tokenizer files ask for " + std::to_string(n) +
                             " <extra_id_N> sentinel tokens (tokenizer_config.json's extra_ids, or the highest N "
                             "listed), more than " +
                             std::to_string(kMaxExtraIds) + " (T5 has 100); correct them");
  }
  if (auto pointer = lfs_pointer_message(model_file)) throw TokenizerLoadError(*pointer);
  // Read once (it can be megabytes), for the added tokens and the prepend scheme.
  std::optional<nlohmann::json> tokenizer_json_here;
  const nlohmann::json* const tj = tokenizer_json_of(model_dir, parsed_tokenizer_json, tokenizer_json_here);
  const auto added_listed = listed_added_tokens(model_dir, tj, config);
  try {
    std::string serialized = read_binary_file(model_file);  // read once: checked, then loaded from these bytes
    check_not_cut_short(serialized, model_file);
    // Hugging Face's "never" (tokenizer.json's Metaspace, which the fast tokenizer runs): no U+2581 before
    // the first word either, as spiece.model's dummy prefix would put there (the unprefixed model encodes).
    const bool never = tj && metaspace_never_prefixes(*tj);
    auto sp = never ? load_with_dummy_prefix(serialized, true) : SentencePieceProcessor::load_from_bytes(serialized);
    std::vector<AddedToken> in_vocabulary;
    auto added = tokens_after_the_sentinels(added_listed, sp, n, model_dir, in_vocabulary);
    // Without the dummy prefix: the "first" and "never" schemes' model, else encode_word's alone.
    auto unprefixed = load_unprefixed(std::move(serialized));
    const bool prefixes_once = never || prefixes_first_only(tj, config);
    return std::make_unique<SentencePieceTokenizer>(
        std::move(sp), n, prefixes_once ? std::optional(unprefixed) : std::nullopt, std::move(added),
        tj && metaspace_decoder_keeps_first_space(*tj), tj && metaspace_keeps_trailing_space(*tj), never,
        tj ? unicode_whitespace_handling(*tj) : UnicodeWhitespace::kNone, std::move(unprefixed),
        std::move(in_vocabulary));
  } catch (const TokenizerLoadError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw TokenizerLoadError(model_dir.string() + ": " + e.what());
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();  // SentencePieceProcessor::load's names the file already
    throw TokenizerLoadError(what.find(model_file.string()) != std::string::npos
                                 ? what
                                 : "cannot load SentencePiece model " + model_file.string() + ": " + what);
  }
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceProcessor sp, int64_t extra_ids,
                                               std::optional<SentencePieceProcessor> unprefixed,
                                               std::vector<AddedToken> added, bool first_space_kept,
                                               bool trailing_space_kept, bool never_prefixed,
                                               UnicodeWhitespace unicode_whitespace,
                                               std::optional<SentencePieceProcessor> inside_word,
                                               const std::vector<AddedToken>& listed_in_vocabulary)
    : sp_(std::move(sp)),
      unprefixed_(std::move(unprefixed)),
      inside_word_(inside_word ? std::move(inside_word) : unprefixed_),
      sp_size_(sp_.vocab_size()),
      extra_ids_(extra_ids),
      added_(std::move(added)),
      first_space_kept_(first_space_kept),
      trailing_space_kept_(trailing_space_kept),
      never_prefixed_(never_prefixed && unprefixed_.has_value()),
      space_id_(sp_.piece_to_id(kSpace)),
      unicode_whitespace_(unicode_whitespace) {
  if (extra_ids_ < 0) throw std::invalid_argument("extra_ids must be >= 0, got " + std::to_string(extra_ids_));
  for (size_t i = 0; i < added_.size(); ++i) {
    if (added_[i].id != extras_end() + static_cast<int64_t>(i)) {
      throw std::invalid_argument("added token '" + added_[i].content + "' has id " + std::to_string(added_[i].id) +
                                  "; added tokens take the ids after the SentencePiece pieces and the " +
                                  std::to_string(extra_ids_) + " sentinels, one after another from " +
                                  std::to_string(extras_end()));
    }
  }
  bos_ = valid_id(sp_.bos_id());
  eos_ = valid_id(sp_.eos_id());
  pad_ = valid_id(sp_.pad_id());
  std::vector<AddedToken> specials;
  for (int32_t id = 0; id < sp_size_; ++id) {
    if (sp_.is_control(id) || sp_.is_unknown(id)) specials.push_back({sp_.id_to_piece(id), id});
  }
  for (int64_t id = sp_size_; id < extras_end(); ++id) specials.push_back({id_to_token(id), id});
  // The files' lstrip, rstrip and single_word for them, as Hugging Face's fast tokenizer takes them (T5Tokenizer
  // saves its sentinels with lstrip and rstrip).
  for (auto& special : specials) {
    for (const auto& listed : listed_in_vocabulary) {
      if (listed.id != special.id || listed.content != special.content) continue;
      special.lstrip = listed.lstrip;
      special.rstrip = listed.rstrip;
      special.single_word = listed.single_word;
    }
  }
  specials.insert(specials.end(), added_.begin(), added_.end());
  splitter_ = AddedTokenSplitter(std::move(specials));
  for (int32_t id = 0; id < sp_size_ && lead_id_ < 0; ++id) {
    if (sp_.is_control(id) || sp_.is_unknown(id) || sp_.is_byte(id)) continue;
    const std::string piece = sp_.id_to_piece(id);
    if (piece.empty() || piece.compare(0, kSpace.size(), kSpace) == 0) continue;
    if (std::string text = sp_.decode({id}); !text.empty() && text.find(' ') == std::string::npos) {
      lead_ = std::move(text);
      lead_id_ = id;
    }
  }
  if (unicode_whitespace_ != UnicodeWhitespace::kNone) {
    // Those the character map turns into a space or removes SentencePiece handles as Hugging Face does.
    for (char32_t cp = 0; cp <= 0x3000; ++cp) {
      if (cp == ' ' || !utf8::is_whitespace(cp)) continue;
      std::string text;
      utf8::append(text, cp);
      if (!sp_.encode(text).empty()) kept_whitespace_.push_back(cp);
    }
  }
  if (unprefixed_) {
    for (const char* candidate : {"a", "x", "e", "0", "."}) {
      const auto ids = unprefixed_->encode(std::string(candidate) + " b");
      if (ids.size() >= 2 && unprefixed_->id_to_piece(ids[0]) == candidate &&
          unprefixed_->id_to_piece(ids[1]).compare(0, kSpace.size(), kSpace) == 0) {
        anchor_ = candidate;
        anchor_id_ = ids[0];
        break;
      }
    }
  }
}

TokenIds SentencePieceTokenizer::encode(std::string_view text) const { return encode(text, true, nullptr); }

TokenIds SentencePieceTokenizer::encode_word(std::string_view word, bool after_space) const {
  const size_t first = utf8::sequence_length(word, 0);
  const bool spaced = first > 0 && utf8::is_whitespace(utf8::decode_at(word, 0, first));
  // After a space: " word", which every prepend scheme gives its U+2581 (the legacy one gives "word" the same).
  if (after_space || spaced || !inside_word_) {
    return spaced ? encode(word, false, nullptr) : encode(" " + std::string(word), false, nullptr);
  }
  return encode(word, false, &*inside_word_);
}

TokenIds SentencePieceTokenizer::encode(std::string_view text, bool add_eos,
                                        const SentencePieceProcessor* start) const {
  TokenIds ids;
  for (const auto& seg : splitter_.split(text)) {
    if (seg.id) {
      ids.push_back(*seg.id);
      continue;
    }
    const auto& processor = start != nullptr && seg.text.data() == text.data() ? *start : processor_for(seg.text, text);
    for (const int32_t id :
         kept_whitespace_.empty() ? processor.encode(seg.text) : processor.encode(hf_whitespace(seg.text))) {
      ids.push_back(id);
    }
    // Hugging Face's Metaspace splits "x " into "▁x" and "▁" where no normalizer strips the end.
    if (trailing_space_kept_ && ends_with_space(seg.text)) ids.push_back(space_id_);
  }
  if (add_eos && eos_) ids.push_back(*eos_);
  return ids;
}

std::string SentencePieceTokenizer::hf_whitespace(std::string_view segment) const {
  // Hugging Face's WhitespaceSplit and Strip take Rust's whitespace; SentencePiece's only the space.
  std::string out;
  std::vector<size_t> kept_at;  // where out has a kept whitespace character (kStripEnd)
  size_t text_end = 0;          // out's length up to its last character that is not whitespace
  for (size_t at = 0; at < segment.size();) {
    const size_t valid = utf8::sequence_length(segment, at);
    const size_t len = std::max<size_t>(valid, 1);
    const char32_t cp = valid > 0 ? utf8::decode_at(segment, at, len) : 0xFFFD;
    const bool kept = std::find(kept_whitespace_.begin(), kept_whitespace_.end(), cp) != kept_whitespace_.end();
    if (kept && unicode_whitespace_ == UnicodeWhitespace::kSplit) {
      out.push_back(' ');
    } else {
      if (kept) kept_at.push_back(out.size());
      out.append(segment.substr(at, len));
      if (!utf8::is_whitespace(cp)) text_end = out.size();
    }
    at += len;
  }
  if (unicode_whitespace_ != UnicodeWhitespace::kStripEnd) return out;
  out.resize(text_end);
  // Strip sees the normalized text: behind a kept character, what the model removes or makes a space ("\x7F",
  // U+200B) leaves it at the end.
  while (!kept_at.empty()) {
    const size_t at = kept_at.back();
    kept_at.pop_back();
    if (at >= out.size()) continue;
    const size_t after = at + utf8::sequence_length(out, at);
    if (!sp_.encode(std::string_view(out).substr(after)).empty()) break;
    out.resize(at);
  }
  return out;
}

const SentencePieceProcessor& SentencePieceTokenizer::processor_for(std::string_view segment,
                                                                    std::string_view text) const {
  // Hugging Face's "first": U+2581 is prepended only to the text at the very start of the input; other
  // text keeps the space it starts with, which the unprefixed model would strip (SentencePiece
  // removes leading whitespace), so that text goes through the prefixing model, which gives the same.
  // "never": no text gets a U+2581 of its own, the text at the start neither; one that starts with a space
  // keeps it as "▁" all the same.
  if (!unprefixed_ || (!never_prefixed_ && segment.data() == text.data()) || starts_with_space(segment)) return sp_;
  return *unprefixed_;
}

bool SentencePieceTokenizer::starts_with_space(std::string_view segment) const {
  // Which characters normalize to a space is the model's character map's business (T5's maps U+200B
  // to one and drops U+000B), so ask the model: behind the anchor, leading whitespace survives.
  if (anchor_.empty()) {
    const size_t len = utf8::sequence_length(segment, 0);
    return len > 0 && utf8::is_whitespace(utf8::decode_at(segment, 0, len));
  }
  // Only its start matters: its first 64 bytes, not a whole document encoded once more, unless the model
  // drops all of those (a run of characters its normalizer removes).
  auto ids = unprefixed_->encode(anchor_ + std::string(segment.substr(0, 64)));
  if (ids.size() < 2 && segment.size() > 64) ids = unprefixed_->encode(anchor_ + std::string(segment));
  return ids.size() >= 2 && ids[0] == anchor_id_ &&
         unprefixed_->id_to_piece(ids[1]).compare(0, kSpace.size(), kSpace) == 0;
}

bool SentencePieceTokenizer::ends_with_space(std::string_view segment) const {
  // As starts_with_space: the model's character map says what is whitespace (T5's maps U+00A0, U+200B
  // and U+FEFF to a space), so ask it. Between two lead_ pieces SentencePiece strips no whitespace, and the
  // pieces spell the normalized text with U+2581 for its spaces. Only the end matters: the last 64 bytes,
  // unless the model drops all of those.
  if (lead_.empty()) {
    size_t start = segment.size();
    while (start > 0 && (static_cast<unsigned char>(segment[--start]) & 0xC0) == 0x80) {
    }
    const size_t len = start < segment.size() ? utf8::sequence_length(segment, start) : 0;
    return len > 0 && utf8::is_whitespace(utf8::decode_at(segment, start, len));
  }
  const auto spelled = [&](std::string_view tail) {
    std::string pieces;
    for (const int32_t id : sp_.encode(lead_ + std::string(tail) + lead_)) pieces += sp_.id_to_piece(id);
    return pieces;
  };
  size_t from = segment.size() > 64 ? segment.size() - 64 : 0;
  while (from > 0 && (static_cast<unsigned char>(segment[from]) & 0xC0) == 0x80) --from;
  std::string pieces = spelled(segment.substr(from));
  if (from > 0 && pieces.size() <= kSpace.size() + 2 * lead_.size()) pieces = spelled(segment);
  const std::string end = std::string(kSpace) + lead_;
  return pieces.size() >= end.size() && pieces.compare(pieces.size() - end.size(), end.size(), end) == 0;
}

void SentencePieceTokenizer::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside the tokenizer vocabulary [0, " +
                                std::to_string(vocab_size()) + ")");
  }
}

std::string SentencePieceTokenizer::decode_run(const std::vector<int32_t>& run, bool at_start) const {
  if (at_start) {
    // Hugging Face's Metaspace decoder (the fast tokenizer's) drops every U+2581 of the first token and makes
    // every later one a space. SentencePiece drops the first U+2581 of each piece up to the first text: "▁",
    // "▁word" gave "word" where transformers gives " word", and a first "▁▁" gave " " where it gives "".
    const int32_t first = run.front();
    std::string piece = sp_.id_to_piece(first);
    if (!sp_.is_byte(first) && !sp_.is_unknown(first) && piece.find(kSpace) != std::string::npos) {
      for (size_t at = piece.find(kSpace); at != std::string::npos; at = piece.find(kSpace, at)) {
        piece.erase(at, kSpace.size());
      }
      return run.size() > 1 ? piece + decode_run({run.begin() + 1, run.end()}, false) : piece;
    }
    return sp_.decode(run);
  }
  // SentencePiece drops the leading U+2581 of a text's start: of every piece until one gives text where the
  // model removes extra whitespace (T5's), of the first piece alone where it does not. Behind a piece that
  // gives text of its own no U+2581 is dropped, so that piece's text is cut off instead.
  if (lead_id_ >= 0) {
    std::vector<int32_t> led;
    led.reserve(run.size() + 1);
    led.push_back(lead_id_);
    led.insert(led.end(), run.begin(), run.end());
    return sp_.decode(led).substr(lead_.size());
  }
  std::string text = sp_.decode(run);
  // (No such piece: SentencePiece's rule for T5's models.)
  std::string spaces;
  for (const int32_t id : run) {
    if (sp_.is_control(id)) continue;
    if (sp_.is_byte(id) || sp_.is_unknown(id)) break;
    const std::string piece = sp_.id_to_piece(id);
    if (piece.compare(0, kSpace.size(), kSpace) != 0) break;
    spaces.push_back(' ');
    if (piece.size() > kSpace.size()) break;
  }
  return spaces + text;
}

std::string SentencePieceTokenizer::decode_raw(const TokenIds& ids, bool skip_special) const {
  std::string out;
  std::vector<int32_t> run;
  // Whether no token has reached Hugging Face's Metaspace decoder yet (skipped special tokens do not).
  bool first = !first_space_kept_;
  for (const int64_t id : ids) {
    check_id(id);
    if (is_special(id) || added(id) != nullptr) {  // an added token that is not special is text of its own
      if (skip_special && is_special(id)) continue;
      if (!run.empty()) {
        out += decode_run(run, first);
        first = false;
      }
      run.clear();
      // Its text goes through the Metaspace decoder as well: an added "▁word" gives " word", or "word" first.
      const std::string token = id_to_token(id);
      for (size_t at = 0; at < token.size();) {
        if (token.compare(at, kSpace.size(), kSpace) == 0) {
          if (!first) out.push_back(' ');
          at += kSpace.size();
        } else {
          out.push_back(token[at++]);
        }
      }
      first = false;
      continue;
    }
    run.push_back(static_cast<int32_t>(id));
  }
  if (!run.empty()) out += decode_run(run, first);
  return out;
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  static const std::regex kExtra(R"(<extra_id_(\d{1,9})>)");
  std::match_results<std::string_view::const_iterator> m;
  if (std::regex_match(token.begin(), token.end(), m, kExtra)) {
    const int64_t n = std::stoll(m[1].str());
    if (n < extra_ids_) return extras_end() - 1 - n;
  }
  for (const auto& a : added_) {
    if (a.content == token) return a.id;
  }
  const int32_t id = sp_.piece_to_id(token);
  if (id == sp_.unk_id() && sp_.id_to_piece(id) != token) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::id_to_token(int64_t id) const {
  check_id(id);
  if (is_extra(id)) return "<extra_id_" + std::to_string(extras_end() - 1 - id) + ">";
  if (const auto* a = added(id)) return a->content;
  return sp_.id_to_piece(static_cast<int32_t>(id));
}

bool SentencePieceTokenizer::is_special(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  // <unk> too, as Hugging Face's T5 tokenizers count it: skipped with the special tokens, else shown as its
  // piece ("<unk>"); SentencePiece's own decode renders it " \u2047 ".
  if (const auto* a = added(id)) return a->special;
  return is_extra(id) || sp_.is_control(static_cast<int32_t>(id)) || sp_.is_unknown(static_cast<int32_t>(id));
}

}  // namespace srformer
