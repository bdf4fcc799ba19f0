// MiniLM's tokenizer in the reader's browser: a WordPiece that follows the model's tokenizer.json.
//
// BERT's normaliser (control characters dropped, spaces, Chinese characters spaced, accents
// stripped and lower case as the file says), its pre-tokeniser (words and punctuation) and
// WordPiece with the file's vocabulary, [CLS] first and [SEP] last; special tokens typed in the
// text are kept whole. tests/browser/test_live_minilm.py holds it, alone in a blank page, to the
// `tokenizers` package on many texts. It needs nothing else: window.mhaWordPiece is the
// constructor, new mhaWordPiece(spec) with the parsed tokenizer.json, and tokenize(text) gives
// {tokens, ids}. The live model's page (mha-live-minilm.js) tokenises with it.
(function () {
  "use strict";

  var ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  var RE_OTHER = /\p{C}/u; // Cc, Cf, Cs, Co, Cn: Rust's char::is_other
  var RE_SPACE = /\p{White_Space}/u; // Rust's char::is_whitespace
  var RE_PUNCT = /\p{P}/u; // Pc, Pd, Pe, Pf, Pi, Po, Ps
  var RE_MARK = /\p{Mn}/u;

  function isChinese(cp) {
    return (
      (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
      (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
      (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
      (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f)
    );
  }

  function WordPiece(spec) {
    var model = spec.model;
    var norm = spec.normalizer;
    this.vocab = new Map(Object.entries(model.vocab));
    this.unk = model.unk_token;
    this.prefix = model.continuing_subword_prefix;
    this.maxChars = model.max_input_chars_per_word;
    this.lowercase = norm.lowercase;
    this.stripAccents = norm.strip_accents === null ? norm.lowercase : norm.strip_accents;
    this.special = spec.added_tokens.map(function (t) {
      return t.content;
    });
    this.cls = "[CLS]";
    this.sep = "[SEP]";
  }

  WordPiece.prototype.normalize = function (text) {
    var out = [];
    for (var ch of text) {
      var cp = ch.codePointAt(0);
      if (ch === "\t" || ch === "\n" || ch === "\r") {
        out.push(" ");
        continue;
      }
      if (cp === 0 || cp === 0xfffd || RE_OTHER.test(ch)) continue;
      if (RE_SPACE.test(ch)) out.push(" ");
      else if (isChinese(cp)) out.push(" ", ch, " ");
      else out.push(ch);
    }
    var s = out.join("");
    if (this.stripAccents) {
      s = Array.from(s.normalize("NFD"))
        .filter(function (c) {
          return !RE_MARK.test(c);
        })
        .join("");
    }
    if (this.lowercase) {
      s = Array.from(s)
        .map(function (c) {
          return c.toLowerCase(); // one character at a time: no final-sigma rule
        })
        .join("");
    }
    return s;
  };

  WordPiece.prototype.preTokenize = function (s) {
    var words = [];
    var word = "";
    for (var ch of s) {
      if (RE_SPACE.test(ch)) {
        if (word) words.push(word);
        word = "";
      } else if (ASCII_PUNCT.indexOf(ch) >= 0 || RE_PUNCT.test(ch)) {
        if (word) words.push(word);
        words.push(ch);
        word = "";
      } else {
        word += ch;
      }
    }
    if (word) words.push(word);
    return words;
  };

  WordPiece.prototype.wordPieces = function (word) {
    var chars = Array.from(word);
    if (chars.length > this.maxChars) return [this.unk];
    var pieces = [];
    var start = 0;
    while (start < chars.length) {
      var end = chars.length;
      var found = null;
      while (start < end) {
        var sub = chars.slice(start, end).join("");
        if (start > 0) sub = this.prefix + sub;
        if (this.vocab.has(sub)) {
          found = sub;
          break;
        }
        end -= 1;
      }
      if (found === null) return [this.unk];
      pieces.push(found);
      start = end;
    }
    return pieces;
  };

  // The tokens of one text, [CLS] first and [SEP] last. Special tokens typed in the text
  // ("[SEP]") are matched before normalisation, as the tokenizers package does.
  WordPiece.prototype.tokenize = function (text) {
    var tokens = [this.cls];
    var specials = this.special;
    var rest = text;
    var self_ = this;
    function plain(piece) {
      self_.preTokenize(self_.normalize(piece)).forEach(function (w) {
        Array.prototype.push.apply(tokens, self_.wordPieces(w));
      });
    }
    while (rest.length) {
      var at = -1;
      var hit = null;
      specials.forEach(function (sp) {
        var i = rest.indexOf(sp);
        if (i >= 0 && (at < 0 || i < at || (i === at && sp.length > hit.length))) {
          at = i;
          hit = sp;
        }
      });
      if (at < 0) {
        plain(rest);
        break;
      }
      plain(rest.slice(0, at));
      tokens.push(hit);
      rest = rest.slice(at + hit.length);
    }
    tokens.push(this.sep);
    var vocab = this.vocab;
    return {
      tokens: tokens,
      ids: tokens.map(function (t) {
        return vocab.get(t);
      }),
    };
  };

  window.mhaWordPiece = WordPiece;
})();
