"""Independent Porter stems for the stemmer parity test: NLTK's PorterStemmer in its default mode
(NLTK_EXTENSIONS), the stemmer rouge-score constructs. Debian package python3-nltk.

usage: /usr/bin/python3 nltk_porter_reference.py WORDS_FILE STEMS_FILE   (one word per line)
"""
import sys

from nltk.stem import porter

stemmer = porter.PorterStemmer()
with open(sys.argv[1], encoding="utf-8") as f:
    words = [w for w in f.read().split("\n") if w]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("".join(stemmer.stem(w) + "\n" for w in words))
