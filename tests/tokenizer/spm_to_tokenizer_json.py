"""Writes the tokenizer.json that Hugging Face's T5 converter makes from a SentencePiece model, for
the tokenizer.json-only tests. Reads the model with the protobuf bindings of Debian's
python3-sentencepiece, independently of the C++ converter under test.

usage: spm_to_tokenizer_json.py SPIECE_MODEL EXTRA_IDS STYLE OUT
  STYLE current:    normalizer [Precompiled, Strip right, Replace " {2,}" by U+2581], pre-tokenizer Metaspace
                    (prepend_scheme always)
  STYLE first:      the same with prepend_scheme first (what T5 with legacy=False converts to)
  STYLE unstripped: normalizer [Precompiled, Replace " {2,}" by " "], pre-tokenizer Metaspace (prepend_scheme
                    always), as transformers converted before it added Strip: a text's trailing whitespace
                    gives a "\u2581" token
  STYLE legacy:     normalizer Precompiled, pre-tokenizer [WhitespaceSplit, Metaspace (add_prefix_space)]
"""
import base64
import json
import sys

from sentencepiece import sentencepiece_model_pb2 as pb

PIECE = pb.ModelProto.SentencePiece


def main():
    path, extra, style, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    model = pb.ModelProto()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    pieces = list(model.pieces)
    vocab = [[p.piece, p.score] for p in pieces]
    vocab += [[f"<extra_id_{i}>", 0.0] for i in range(extra - 1, -1, -1)]
    unk_id = next(i for i, p in enumerate(pieces) if p.type == PIECE.UNKNOWN)

    def added(i, content, special):
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": special}

    added_tokens = [added(i, p.piece, p.type != PIECE.USER_DEFINED) for i, p in enumerate(pieces)
                    if p.type in (PIECE.UNKNOWN, PIECE.CONTROL, PIECE.USER_DEFINED)]
    added_tokens += [added(len(pieces) + k, vocab[len(pieces) + k][0], True) for k in range(extra)]

    charsmap = base64.b64encode(model.normalizer_spec.precompiled_charsmap).decode("ascii")
    precompiled = {"type": "Precompiled", "precompiled_charsmap": charsmap}
    if style in ("current", "first"):
        normalizer = {"type": "Sequence", "normalizers": [
            precompiled, {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
        pre_tokenizer = {"type": "Metaspace", "replacement": "\u2581",
                         "prepend_scheme": "always" if style == "current" else "first", "split": True}
    elif style == "unstripped":
        normalizer = {"type": "Sequence", "normalizers": [
            precompiled, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
        pre_tokenizer = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    elif style == "legacy":
        normalizer = precompiled
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}]}
    else:
        sys.exit(f"unknown style {style}")
    eos = next(i for i, p in enumerate(pieces) if p.piece == "</s>")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": unk_id, "vocab": vocab,
                  "byte_fallback": model.trainer_spec.byte_fallback},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
