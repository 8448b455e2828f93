"""Small hand-written corpora for looking inside a sentence encoder.

* :data:`DETERMINER_SENTENCES` -- 24 plain sentences, each with its determiner-noun pairs
  annotated by hand ("the ... dog"), with 0 to 4 words between determiner and noun so that
  no fixed offset finds the noun; :func:`determiner_noun_pairs` turns them into token indices
* :data:`RETRIEVAL_PAIRS` -- 12 questions, each with the one passage that answers it, in
  confusable pairs of topics (boiling / frying an egg, cats / dogs, train / plane to Paris...)

Every word of these sentences is a single word piece of MiniLM's vocabulary (the tests check
this), so a token index is a word index plus one (for [CLS]).
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["DETERMINER_SENTENCES", "RETRIEVAL_PAIRS", "determiner_noun_pairs", "words_of"]

# (sentence, [(determiner, noun), ...]); pairs in the order of the nouns in the sentence
DETERMINER_SENTENCES: list[tuple[str, list[tuple[str, str]]]] = [
    ("The dog chased a very small red ball across the wide green field.",
     [("the", "dog"), ("a", "ball"), ("the", "field")]),
    ("A tall old man sold the car to his young neighbour.",
     [("a", "man"), ("the", "car"), ("his", "neighbour")]),
    ("The very hungry cat ate the fish from a blue plate.",
     [("the", "cat"), ("the", "fish"), ("a", "plate")]),
    ("My brother painted the small wooden door of the house.",
     [("my", "brother"), ("the", "door"), ("the", "house")]),
    ("The old stone bridge crossed a deep and narrow river.",
     [("the", "bridge"), ("a", "river")]),
    ("A bird sang in the tall tree near the quiet old church.",
     [("a", "bird"), ("the", "tree"), ("the", "church")]),
    ("Her little sister found a shiny silver coin on the road.",
     [("her", "sister"), ("a", "coin"), ("the", "road")]),
    ("The students read a long and difficult book about the war.",
     [("the", "students"), ("a", "book"), ("the", "war")]),
    ("Their new teacher gave the class a short test.",
     [("their", "teacher"), ("the", "class"), ("a", "test")]),
    ("The big black dog slept under the kitchen table.",
     [("the", "dog"), ("the", "table")]),
    ("A cold wind blew the dry brown leaves into the garden.",
     [("a", "wind"), ("the", "leaves"), ("the", "garden")]),
    ("The young doctor visited an old and very sick patient.",
     [("the", "doctor"), ("an", "patient")]),
    ("Our neighbours bought a very expensive new car.",
     [("our", "neighbours"), ("a", "car")]),
    ("The small boat sailed across the calm blue sea.",
     [("the", "boat"), ("the", "sea")]),
    ("His father fixed the old broken chair in the kitchen.",
     [("his", "father"), ("the", "chair"), ("the", "kitchen")]),
    ("A group of children played with the ball.",
     [("a", "group"), ("the", "ball")]),
    ("The city library opened a new reading room.",
     [("the", "library"), ("a", "room")]),
    ("The quick brown fox jumps over the lazy dog.",
     [("the", "fox"), ("the", "dog")]),
    ("A very large truck blocked the narrow street.",
     [("a", "truck"), ("the", "street")]),
    ("The old woman gave her grandson a warm winter coat.",
     [("the", "woman"), ("her", "grandson"), ("a", "coat")]),
    ("The story ends with a happy surprise.",
     [("the", "story"), ("a", "surprise")]),
    ("My friend lost the keys to his red car.",
     [("my", "friend"), ("the", "keys"), ("his", "car")]),
    ("The tired workers finished the long and hard day.",
     [("the", "workers"), ("the", "day")]),
    ("A young girl wrote a letter to the president.",
     [("a", "girl"), ("a", "letter"), ("the", "president")]),
]

RETRIEVAL_PAIRS: list[tuple[str, str]] = [
    ("How long should I boil an egg?", "Cook eggs in boiling water for about seven minutes."),
    ("How do I fry an egg?", "Heat oil in a pan and crack the egg into it."),
    ("What do cats like to eat?", "Cats are carnivores and need meat in their diet."),
    ("What do dogs like to eat?", "Most dogs happily eat meat, rice and vegetables."),
    ("How do I train my cat to use a litter box?",
     "Place the tray in a quiet corner and show it to the kitten."),
    ("How do I teach my dog to sit?",
     "Hold a treat above its nose and reward the puppy when it sits."),
    ("When does the train to Paris leave?", "The next service to Paris departs at nine fifteen."),
    ("How much is a plane ticket to Paris?", "Flights to Paris cost around two hundred euros."),
    ("Is it going to rain tomorrow?", "Showers are expected across the region on Tuesday."),
    ("Will it be sunny this weekend?",
     "Clear skies and warm weather are forecast for Saturday and Sunday."),
    ("Who wrote Hamlet?", "The tragedy of the Danish prince is a play by Shakespeare."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci created the famous portrait."),
]


def words_of(sentence: str) -> list[str]:
    """Lower-cased words and punctuation marks, as BERT's basic tokenizer splits them."""
    return re.findall(r"\w+|[^\w\s]", sentence.lower())


def determiner_noun_pairs(tokens: Sequence[Sequence[str]]
                          ) -> list[tuple[int, int, int]]:
    """``(sentence, determiner token, noun token)`` for every annotated pair.

    ``tokens`` are the tokenized :data:`DETERMINER_SENTENCES` (with [CLS] and [SEP]), in
    order. Each noun is its next unused occurrence in the sentence, and its determiner the
    nearest earlier occurrence of the determiner word. Raises ``ValueError`` if a sentence
    was not split into one token per word.
    """
    if len(tokens) != len(DETERMINER_SENTENCES):
        raise ValueError(f"tokens: expected the {len(DETERMINER_SENTENCES)} tokenized "
                         f"DETERMINER_SENTENCES, got {len(tokens)} sequences")
    pairs = []
    for s, ((sentence, annotated), toks) in enumerate(zip(DETERMINER_SENTENCES, tokens)):
        if list(toks[1:-1]) != words_of(sentence):
            raise ValueError(f"tokens: sentence {s} is not one token per word: {list(toks)}")
        used: set[int] = set()
        for det, noun in annotated:
            n = next(i for i, t in enumerate(toks) if t == noun and i not in used)
            used.add(n)
            d = max(i for i in range(n) if toks[i] == det)
            pairs.append((s, d, n))
    return pairs
