"""Seeded generators for kvserve's synthetic tasks (used both in training and for the eval sets).

Every example is plain text: `prompt` (what is prefilled) and `answer` (the exact completion line the
model must produce greedily, without the trailing newline). The prompt always ends with "Answer:" and
the answer starts with a space, so exact match = the greedy continuation up to the first newline
equals `answer`. A training example is prompt + answer + "\n" (+ more questions for qa/multihop).

Tasks:
  qa        single-hop retrieval: facts "The red jar holds the number 4821." planted at sentence
            boundaries of real prose; one question at the end. The answer restates the fact it
            found: " The red jar holds the number 4821." Within an example no two entities share a
            colour or an object.
  multihop  chains "The blue box points to the red jar." ... "The red jar holds the number 4821.";
            the answer restates each fact of the chain in order (a worked chain, like math's
            worked steps): " The blue box points to the red jar. The red jar holds the number 4821."
  Restating answers (run 3) make the task easier for a ~10M model, not the metric looser: exact
  match still needs every token, including the retrieved number, and the number appears in the
  context only once.
  math      multi-step arithmetic word problems with small numbers and a worked answer line:
            " 7 + 5 = 12. 12 - 3 = 9. The answer is 9."; few-shot (solved problems before it).
  code      line completion in held-out Python files: the prompt ends after the first word of a line,
            the answer is the rest of that line, which occurs earlier in the file (make_workloads.py).
"""
import random
import re

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "brown", "grey",
           "pink", "silver", "golden", "dark", "pale", "bright"]
OBJECTS = ["box", "jar", "bag", "cup", "door", "lamp", "book", "coin", "ring", "vase", "chest", "bell",
           "key", "hat", "stone", "boat", "drum", "clock"]
NAMES = ["Tom", "Anna", "Ben", "Lucy", "Sam", "Mia", "Jack", "Emma", "Leo", "Kate", "Max", "Nora",
         "Paul", "Rosa", "Dan", "Ella"]
ITEMS = ["apples", "pens", "coins", "books", "cards", "eggs", "shells", "stamps", "marbles", "cookies",
         "stickers", "flowers"]
ADD = ["{n} buys {k} more {it}.", "{n} finds {k} more {it}.", "{n} gets {k} more {it} from a friend.",
       "{n} picks up {k} more {it}."]
SUB = ["{n} gives away {k} {it}.", "{n} loses {k} {it}.", "{n} sells {k} {it}.", "{n} uses {k} {it}."]

_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def _entities(rng, n):
    """n entities with pairwise distinct colours AND distinct objects, so one word of the key
    identifies the fact (keeps retrieval learnable for a ~30M model)."""
    return [f"{c} {o}" for c, o in zip(rng.sample(COLOURS, n), rng.sample(OBJECTS, n))]


def _overlapping_entities(rng, n):
    """n distinct (colour, object) pairs that may share a colour or an object with each other: a
    question's key then needs both words (harder retrieval: the eval sets' -hard variants)."""
    pairs = rng.sample([(c, o) for c in COLOURS for o in OBJECTS], n)
    return [f"{c} {o}" for c, o in pairs]


def _number(rng):
    return str(rng.randint(1000, 9999))


def _hold(e, num):
    return f"The {e} holds the number {num}."


def _points(a, b):
    return f"The {a} points to the {b}."


def plant(rng, prose, facts):
    """Inserts each fact at a distinct random sentence boundary of `prose` (keeping their order
    random); returns the text."""
    sents = _SENT_END.split(prose.strip())
    slots = sorted(rng.sample(range(len(sents) + 1), min(len(facts), len(sents) + 1)))
    if len(slots) < len(facts):
        slots += [len(sents)] * (len(facts) - len(slots))
    out, fi = [], 0
    for i in range(len(sents) + 1):
        while fi < len(facts) and slots[fi] == i:
            out.append(facts[fi])
            fi += 1
        if i < len(sents):
            out.append(sents[i])
    return " ".join(out)


def qa_example(rng, prose, n_facts=None, n_questions=1, overlapping=False):
    """Single-hop retrieval. Returns (text_prompt, [(question, answer), ...]); the first
    n_questions facts are asked, in random order. overlapping: entities may share a colour or an
    object (harder)."""
    n_facts = n_facts or rng.randint(2, 6)
    ents = (_overlapping_entities if overlapping else _entities)(rng, n_facts)
    nums = [_number(rng) for _ in ents]
    facts = [_hold(e, v) for e, v in zip(ents, nums)]
    order = list(range(n_facts))
    rng.shuffle(order)
    context = plant(rng, prose, [facts[i] for i in order])
    asked = rng.sample(range(n_facts), min(n_questions, n_facts))
    qas = [(f"Question: What number does the {ents[i]} hold?", " " + _hold(ents[i], nums[i])) for i in asked]
    return context, qas


def multihop_example(rng, prose, hops=None, n_chains=None, n_questions=1, overlapping=False):
    """Chains of `hops` facts (2 or 3): start -> ... -> holder holds number; distractor chains too.
    overlapping: entities may share a colour or an object (harder)."""
    n_chains = n_chains or rng.randint(2, 3)
    chains = []
    ents = (_overlapping_entities if overlapping else _entities)(rng, n_chains * 3)
    for c in range(n_chains):
        h = hops or rng.randint(2, 3)
        chain = ents[c * 3:c * 3 + h]
        chains.append((chain, _number(rng)))
    facts = []
    for chain, num in chains:
        for a, b in zip(chain, chain[1:]):
            facts.append(_points(a, b))
        facts.append(_hold(chain[-1], num))
    rng.shuffle(facts)
    context = plant(rng, prose, facts)
    asked = rng.sample(range(n_chains), min(n_questions, n_chains))
    qas = []
    for i in asked:
        chain, num = chains[i]
        steps = [_points(a, b) for a, b in zip(chain, chain[1:])] + [_hold(chain[-1], num)]
        qas.append((f"Question: Start at the {chain[0]} and follow the pointers. What number do you reach?",
                    " " + " ".join(steps)))
    return context, qas


def qa_text(context, qas):
    """Training text: context, then every question with its answer."""
    return context + "\n" + "".join(f"{q}\nAnswer:{a}\n" for q, a in qas)


def qa_prompt(context, qa):
    q, a = qa
    return context + "\n" + q + "\nAnswer:", a


def math_problem(rng, steps=None):
    steps = steps or rng.randint(2, 3)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    val = rng.randint(2, 15)
    sents = [f"{name} has {val} {item}."]
    work = []
    for _ in range(steps):
        if val > 2 and rng.random() < 0.5:
            k = rng.randint(1, min(val - 1, 9))
            sents.append(rng.choice(SUB).format(n=name, k=k, it=item))
            work.append(f"{val} - {k} = {val - k}.")
            val -= k
        else:
            k = rng.randint(1, 9)
            sents.append(rng.choice(ADD).format(n=name, k=k, it=item))
            work.append(f"{val} + {k} = {val + k}.")
            val += k
    q = f"Problem: {' '.join(sents)} How many {item} does {name} have now?"
    a = " " + " ".join(work) + f" The answer is {val}."
    return q, a


def math_text(rng, n_problems):
    return "".join(f"{q}\nAnswer:{a}\n" for q, a in (math_problem(rng) for _ in range(n_problems)))


def math_prompt(rng, shots=4):
    """Few-shot: `shots` solved problems, then the question."""
    prefix = math_text(rng, shots)
    q, a = math_problem(rng)
    return prefix + q + "\nAnswer:", a
