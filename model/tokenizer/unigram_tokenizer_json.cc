#include "model/tokenizer/unigram_tokenizer_json.h"

#include <algorithm>
#include <array>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/protobuf_wire.h"
#include "model/tokenizer/tokenizer_error.h"

namespace srformer {

namespace {

using nlohmann::json;

constexpr std::string_view kMetaSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's whitespace

// sentencepiece_model.proto: ModelProto.SentencePiece.Type
enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6 };

struct Piece {
  std::string text;
  float score = 0;
  PieceType type = PieceType::kNormal;
};

// How the normalizer and pre-tokenizer map onto SentencePiece's NormalizerSpec.
struct Normalization {
  std::string charsmap;  // Precompiled's map, decoded
  bool add_dummy_prefix = true;
  bool found_metaspace = false;
};

std::string base64_decode(const std::string& text, const std::string& where) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) v[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int nbits = 0;
  size_t padding = 0;
  for (const char c : text) {
    if (c == '=') {
      ++padding;
      continue;
    }
    const int8_t v = kValue[static_cast<unsigned char>(c)];
    if (v < 0 || padding > 0) throw TokenizerLoadError(where + " is not valid base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(static_cast<char>((bits >> nbits) & 0xFF));
    }
  }
  if (padding > 2 || (text.size() % 4 != 0 && padding > 0)) throw TokenizerLoadError(where + " is not valid base64");
  return out;
}

// A Metaspace's prepend scheme: "never" where add_prefix_space is false, else prepend_scheme where it says one,
// else Hugging Face's default "always". tokenizers 0.14-0.18 wrote both keys, prepend_scheme "always" beside
// every add_prefix_space false, and prepended nothing then (nor dropped the decoder's first space); 0.19 on
// refuse that pair unless prepend_scheme is "never". "" without a Metaspace.
std::string prepend_scheme_of(const json* metaspace) {
  if (metaspace == nullptr) return "";
  const json& add = metaspace->contains("add_prefix_space") ? (*metaspace)["add_prefix_space"] : json();
  if (add.is_boolean() && !add.get<bool>()) return "never";
  if (metaspace->contains("prepend_scheme") && (*metaspace)["prepend_scheme"].is_string()) {
    return (*metaspace)["prepend_scheme"].get<std::string>();
  }
  return "always";
}
std::string prepend_scheme_of(const json& metaspace) { return prepend_scheme_of(&metaspace); }

std::string type_of(const json& j) { return j.is_object() && j.contains("type") ? j["type"].dump() : "untyped"; }

void read_normalizer(const json& n, const std::string& where, Normalization& out) {
  if (n.is_null()) return;
  const std::string type = n.is_object() ? n.value("type", "") : "";
  if (type == "Sequence") {
    const json& list = n.contains("normalizers") ? n["normalizers"] : json();
    if (!list.is_array()) throw TokenizerLoadError(where + ": a Sequence normalizer without a \"normalizers\" list");
    for (const auto& item : list) read_normalizer(item, where, out);
  } else if (type == "Precompiled") {
    const json& map = n.contains("precompiled_charsmap") ? n["precompiled_charsmap"] : json();
    if (map.is_string()) {
      out.charsmap = base64_decode(map.get<std::string>(), where + " normalizer.precompiled_charsmap");
    } else if (!map.is_null()) {
      throw TokenizerLoadError(where + ": normalizer.precompiled_charsmap must be a base64 string");
    }
  } else if (type == "Replace" || type == "Strip") {
    // Hugging Face's stand-in for SentencePiece's remove_extra_whitespaces: spaces collapsed
    // (Replace " {2,}"), trailing ones stripped. Any other replacement changes the text.
    const json& pattern = n.contains("pattern") ? n["pattern"] : json();
    const bool collapses = type == "Strip" || (pattern.is_object() && pattern.value("Regex", "") == " {2,}");
    if (!collapses) {
      throw TokenizerLoadError(where + ": the normalizer " + n.dump() +
                               " has no SentencePiece equivalent; copy spiece.model from the model's repository");
    }
  } else {
    throw TokenizerLoadError(where + ": the " + type_of(n) +
                             " normalizer has no SentencePiece equivalent (supported: Precompiled, whitespace "
                             "collapsing); copy spiece.model from the model's repository");
  }
}

void read_pre_tokenizer(const json& p, const std::string& where, Normalization& out) {
  if (p.is_null()) return;
  const std::string type = p.is_object() ? p.value("type", "") : "";
  if (type == "Sequence") {
    const json& list = p.contains("pretokenizers") ? p["pretokenizers"] : json();
    if (!list.is_array())
      throw TokenizerLoadError(where + ": a Sequence pre-tokenizer without a \"pretokenizers\" list");
    for (const auto& item : list) read_pre_tokenizer(item, where, out);
  } else if (type == "Metaspace") {
    if (p.value("replacement", std::string(kMetaSymbol)) != kMetaSymbol) {
      throw TokenizerLoadError(where + ": the Metaspace pre-tokenizer replaces spaces with " + p["replacement"].dump() +
                               ", not U+2581 as SentencePiece does");
    }
    const std::string scheme = prepend_scheme_of(p);
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw TokenizerLoadError(where + ": the Metaspace pre-tokenizer's prepend_scheme is " +
                               p["prepend_scheme"].dump() + "; Hugging Face knows \"always\", \"first\" and \"never\"");
    }
    out.add_dummy_prefix = scheme != "never";
    out.found_metaspace = true;
  } else if (type != "WhitespaceSplit") {  // splitting on whitespace is what Metaspace pieces do anyway
    throw TokenizerLoadError(where + ": the " + type_of(p) +
                             " pre-tokenizer has no SentencePiece equivalent (supported: Metaspace, "
                             "WhitespaceSplit); copy spiece.model from the model's repository");
  }
}

std::vector<Piece> read_vocab(const json& model, const std::string& where) {
  const json& vocab = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab.is_array() || vocab.empty()) throw TokenizerLoadError(where + ": model.vocab must be a non-empty list");
  std::vector<Piece> pieces;
  pieces.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& e = vocab[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number() || e[0].get<std::string>().empty()) {
      throw TokenizerLoadError(where + ": model.vocab entry " + std::to_string(i) +
                               " must be [\"piece\", score] with a non-empty piece");
    }
    pieces.push_back({e[0].get<std::string>(), e[1].get<float>()});
  }
  return pieces;
}

// Trailing <extra_id_N> pieces in T5's order (<extra_id_0> last).
int64_t count_trailing_sentinels(const std::vector<Piece>& pieces) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(pieces.size()) &&
         pieces[pieces.size() - 1 - static_cast<size_t>(n)].text == "<extra_id_" + std::to_string(n) + ">") {
    ++n;
  }
  return n;
}

bool is_byte_piece(const std::string& text) {
  static const std::regex kByte("<0x[0-9A-F]{2}>");
  return std::regex_match(text, kByte);
}

std::optional<int64_t> find_piece(const std::vector<Piece>& pieces, const std::string& text) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].text == text) return static_cast<int64_t>(i);
  }
  return std::nullopt;
}

std::string serialize(const std::vector<Piece>& pieces, const Normalization& norm, bool byte_fallback, int64_t unk_id,
                      const SpecialTokenNames& names) {
  std::string proto;
  for (const auto& p : pieces) {
    std::string msg;
    wire::put_bytes(msg, 1, p.text);
    wire::put_float(msg, 2, p.score);
    wire::put_int(msg, 3, static_cast<int>(p.type));
    wire::put_bytes(proto, 1, msg);
  }
  std::string trainer;
  wire::put_int(trainer, 3, 1);  // model_type UNIGRAM
  wire::put_int(trainer, 4, static_cast<int64_t>(pieces.size()));
  wire::put_bool(trainer, 35, byte_fallback);
  wire::put_int(trainer, 40, unk_id);
  wire::put_int(trainer, 41, find_piece(pieces, names.bos).value_or(-1));
  wire::put_int(trainer, 42, find_piece(pieces, names.eos).value_or(-1));
  wire::put_int(trainer, 43, find_piece(pieces, names.pad).value_or(-1));
  wire::put_bytes(trainer, 45, pieces[static_cast<size_t>(unk_id)].text);
  wire::put_bytes(trainer, 46, names.bos);
  wire::put_bytes(trainer, 47, names.eos);
  wire::put_bytes(trainer, 48, names.pad);
  wire::put_bytes(proto, 2, trainer);
  std::string normalizer;
  wire::put_bytes(normalizer, 1, norm.charsmap.empty() ? "identity" : "nmt_nfkc");
  if (!norm.charsmap.empty()) wire::put_bytes(normalizer, 2, norm.charsmap);
  wire::put_bool(normalizer, 3, norm.add_dummy_prefix);
  wire::put_bool(normalizer, 4, true);
  wire::put_bool(normalizer, 5, true);
  wire::put_bytes(proto, 3, normalizer);
  return proto;
}

}  // namespace

namespace {

// The Metaspace in tokenizer.json's `field` ("pre_tokenizer", "decoder"), also inside a Sequence of them
// (listed under `list`); nullptr where it has none.
const json* find_metaspace(const json& tokenizer_json, const char* field, const char* list) {
  const std::function<const json*(const json&)> find = [&](const json& p) -> const json* {
    if (!p.is_object()) return nullptr;
    if (p.value("type", "") == "Sequence" && p.contains(list) && p[list].is_array()) {
      for (const auto& item : p[list]) {
        if (const json* found = find(item)) return found;
      }
      return nullptr;
    }
    return p.value("type", "") == "Metaspace" ? &p : nullptr;
  };
  return tokenizer_json.is_object() && tokenizer_json.contains(field) ? find(tokenizer_json[field]) : nullptr;
}

}  // namespace

bool metaspace_prefixes_first_only(const json& tokenizer_json) {
  return prepend_scheme_of(find_metaspace(tokenizer_json, "pre_tokenizer", "pretokenizers")) == "first";
}

bool metaspace_never_prefixes(const json& tokenizer_json) {
  return prepend_scheme_of(find_metaspace(tokenizer_json, "pre_tokenizer", "pretokenizers")) == "never";
}

bool metaspace_decoder_keeps_first_space(const json& tokenizer_json) {
  return prepend_scheme_of(find_metaspace(tokenizer_json, "decoder", "decoders")) == "never";
}

namespace {

// Whether the tokenizer.json's normalizer strips the text's end (a Strip anywhere in a Sequence).
bool normalizer_strips_end(const json& tokenizer_json) {
  const std::function<bool(const json&)> strips = [&](const json& n) {
    if (!n.is_object()) return false;
    if (n.value("type", "") == "Strip") return n.value("strip_right", true);
    if (n.value("type", "") != "Sequence" || !n.contains("normalizers") || !n["normalizers"].is_array()) return false;
    return std::any_of(n["normalizers"].begin(), n["normalizers"].end(), strips);
  };
  return tokenizer_json.contains("normalizer") && strips(tokenizer_json["normalizer"]);
}

// Whether a WhitespaceSplit comes before the Metaspace in the pre-tokenizer's steps (a Sequence's, or the one).
bool splits_on_whitespace_first(const json& tokenizer_json) {
  const json& pre = tokenizer_json["pre_tokenizer"];
  const json steps =
      pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") ? pre["pretokenizers"] : json::array({pre});
  for (const auto& step : steps) {
    if (!step.is_object()) continue;
    if (step.value("type", "") == "Metaspace") break;
    if (step.value("type", "") == "WhitespaceSplit") return true;
  }
  return false;
}

}  // namespace

bool metaspace_keeps_trailing_space(const json& tokenizer_json) {
  if (find_metaspace(tokenizer_json, "pre_tokenizer", "pretokenizers") == nullptr) return false;
  // Whitespace split off before the Metaspace is gone, as is what a normalizer strips.
  return !splits_on_whitespace_first(tokenizer_json) && !normalizer_strips_end(tokenizer_json);
}

UnicodeWhitespace unicode_whitespace_handling(const json& tokenizer_json) {
  if (find_metaspace(tokenizer_json, "pre_tokenizer", "pretokenizers") == nullptr) return UnicodeWhitespace::kNone;
  if (splits_on_whitespace_first(tokenizer_json)) return UnicodeWhitespace::kSplit;
  return normalizer_strips_end(tokenizer_json) ? UnicodeWhitespace::kStripEnd : UnicodeWhitespace::kNone;
}

bool is_unigram_tokenizer_json(const json& tokenizer_json) {
  return tokenizer_json.is_object() && tokenizer_json.contains("model") && tokenizer_json["model"].is_object() &&
         tokenizer_json["model"].value("type", "") == "Unigram";
}

UnigramModelFromJson sentencepiece_model_from_tokenizer_json(const json& tj, const std::string& where,
                                                             const SpecialTokenNames& names) {
  if (!is_unigram_tokenizer_json(tj)) {
    throw TokenizerLoadError(where + " does not hold a Unigram (SentencePiece) model");
  }
  const json& model = tj["model"];
  std::vector<Piece> pieces = read_vocab(model, where);
  const json& unk = model.contains("unk_id") ? model["unk_id"] : json();
  if (!unk.is_number_integer() || unk.get<int64_t>() < 0 || unk.get<int64_t>() >= static_cast<int64_t>(pieces.size())) {
    throw TokenizerLoadError(where + ": model.unk_id must name a piece of the vocabulary (SentencePiece needs one)");
  }
  const int64_t unk_id = unk.get<int64_t>();
  const bool byte_fallback = model.value("byte_fallback", false);

  Normalization norm;
  read_normalizer(tj.contains("normalizer") ? tj["normalizer"] : json(), where, norm);
  read_pre_tokenizer(tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(), where, norm);
  if (!norm.found_metaspace) {
    throw TokenizerLoadError(where +
                             ": a Unigram model without a Metaspace pre-tokenizer is not SentencePiece-style; "
                             "copy spiece.model from the model's repository");
  }
  // SentencePiece decodes as a Metaspace decoder does; another one (ByteLevel, WordPiece, a Sequence of
  // replacements) gives Hugging Face other text.
  if (const auto it = tj.find("decoder");
      it != tj.end() && !it->is_null() && find_metaspace(tj, "decoder", "decoders") != &*it) {
    throw TokenizerLoadError(where + ": the " + type_of(*it) +
                             " decoder has no SentencePiece equivalent (supported: Metaspace); copy spiece.model "
                             "from the model's repository");
  }

  UnigramModelFromJson out;
  out.extra_ids = count_trailing_sentinels(pieces);
  const auto sp_size = static_cast<int64_t>(pieces.size()) - out.extra_ids;
  if (unk_id >= sp_size) throw TokenizerLoadError(where + ": model.unk_id points at a T5 sentinel");

  // Added tokens in the vocabulary are the control pieces (special) and user-defined ones; they must be the pieces
  // at their ids. Those past it (a checkpoint's own) are the tokenizer's (SentencePieceTokenizer::load).
  std::unordered_map<int64_t, bool> added;  // id -> special
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const auto& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        throw TokenizerLoadError(where + ": added_tokens entry " + a.dump() + " needs an integer id and a content");
      }
      const auto id = a["id"].get<int64_t>();
      const auto content = a["content"].get<std::string>();
      if (id >= static_cast<int64_t>(pieces.size())) continue;
      if (id < 0 || pieces[static_cast<size_t>(id)].text != content) {
        throw TokenizerLoadError(where + ": the added token " + a["content"].dump() + " (id " + std::to_string(id) +
                                 ") is not the vocabulary's piece at that id; restore the file from the model's "
                                 "repository");
      }
      added[id] = a.value("special", false);
    }
  }
  pieces.resize(static_cast<size_t>(sp_size));
  for (int64_t id = 0; id < sp_size; ++id) {
    auto& p = pieces[static_cast<size_t>(id)];
    if (id == unk_id) {
      p.type = PieceType::kUnknown;
    } else if (const auto it = added.find(id); it != added.end()) {
      p.type = it->second ? PieceType::kControl : PieceType::kUserDefined;
    } else if (byte_fallback && is_byte_piece(p.text)) {
      p.type = PieceType::kByte;
    }
  }
  out.model_proto = serialize(pieces, norm, byte_fallback, unk_id, names);
  out.prefix_first_only = metaspace_prefixes_first_only(tj);
  return out;
}

}  // namespace srformer
