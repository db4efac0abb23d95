"""
ContextPacker, in the style of haystack's test_document_joiner.py: token budgets, headers counted exactly and
never cut, the top-ranked and the competing block always packed, omissions recorded; init validation,
serialization and empty input.
"""

import pytest
from haystack.core.serialization import component_from_dict, component_to_dict

from components.common.embedding_models import DEFAULT_MODEL, count_tokens, load_tokenizer
from components.contracts import Competition, EvidenceBlock, PackedBlock
from components.lookup.context_packer import ContextPacker, splits_at_whitespace
from components.lookup.result_assembler import completeness_hint
from tests.components.refusals import assert_refused
from tests.helpers import MODEL, assert_round_trips


def block(
    key: str,
    words: int,
    title: str,
    reasons: list[str],
    source: str | None = None,
    breadcrumb: str | None = None,
    tokens: int | None = None,
) -> EvidenceBlock:
    return EvidenceBlock(
        evidence_key=key,
        source=source or f"ops/{key}.md",
        content="word " * words,
        retrieval_layer="L1",
        score=0.8,
        score_label="s",
        raw_score=0.4,
        raw_score_label="l2_squared_distance",
        rerank_score=0.8,
        hit_reasons=reasons,
        title=title,
        breadcrumb=breadcrumb or f"{title} > Fix",
        tokens=tokens,
    )


LONG_HEADER = block(
    "top",
    200,
    "Rotating the application logs of every worker node before the disk fills up",
    ["vector:sdk attempt 0 (category='ops')", "l0_keyword: log rotation", "l0_title: rotating logs"],
)

SHORT_HEADER = block("second", 200, "Disk", ["vector:sdk attempt 0 (unfiltered)"])


TYPE = "components.lookup.context_packer.ContextPacker"
REASONS = ["vector:sdk attempt 0 (unfiltered)"]


class TestContextPacker:
    def test_init_defaults(self):
        packer = ContextPacker()
        assert (packer.budget_tokens, packer.tokenizer_model) == (1200, DEFAULT_MODEL)

    def test_init_with_custom_parameters(self):
        packer = ContextPacker(budget_tokens=300, tokenizer_model=MODEL)
        assert (packer.budget_tokens, packer.tokenizer_model) == (300, MODEL)

    @pytest.mark.parametrize("budget", [0, -5])
    def test_init_refuses_a_budget_of_no_tokens_by_name(self, budget):
        with pytest.raises(ValueError, match=rf"budget_tokens={budget} must be at least 1"):
            ContextPacker(budget_tokens=budget)

    def test_to_dict(self):
        data = component_to_dict(ContextPacker(budget_tokens=300), "context_packer")
        assert data == {"type": TYPE, "init_parameters": {"budget_tokens": 300, "tokenizer_model": DEFAULT_MODEL}}

    def test_from_dict(self):
        data = {"type": TYPE, "init_parameters": {"budget_tokens": 64, "tokenizer_model": MODEL}}
        packer = component_from_dict(ContextPacker, data, "context_packer")
        assert (packer.budget_tokens, packer.tokenizer_model) == (64, MODEL)

    def test_round_trips(self):
        assert_round_trips(ContextPacker(budget_tokens=500, tokenizer_model=MODEL))

    def test_no_blocks_give_an_empty_pack(self):
        pack = ContextPacker(budget_tokens=100).run(evidence_blocks=[])["context_pack"]
        assert (pack.text, pack.used_tokens, pack.blocks, pack.truncated) == ("", 0, [], False)
        assert pack.included_sources == [] and pack.omitted_sources == [] and pack.omitted_evidence_keys == []

    def test_blocks_that_fit_are_packed_whole_in_rank_order(self):
        blocks = [block("a", 10, "A", REASONS), block("b", 10, "B", REASONS)]
        pack = ContextPacker(budget_tokens=1000).run(evidence_blocks=blocks)["context_pack"]
        assert [b.evidence_key for b in pack.blocks] == ["a", "b"] and not pack.truncated
        assert pack.text.startswith("[1] A") and "\n\n[2] B" in pack.text
        assert pack.used_tokens == count_tokens(MODEL, pack.text)

    def test_a_short_block_is_packed_in_less_room_than_a_stub_needs(self):
        # Under 24 tokens of room a block is omitted, unless its whole content fits there.
        first = block("first", 40, "Doc", REASONS, "ops/doc.md")
        short = block("short", 3, "Doc", REASONS, "ops/other.md")
        long = block("long", 100, "Doc", REASONS, "ops/other.md")
        # Room for the second block's content: its 3 tokens and 5 more, well under 24.
        budget = ContextPacker(budget_tokens=1000).run(evidence_blocks=[first, short])["context_pack"].used_tokens + 5
        packer = ContextPacker(budget_tokens=budget)
        assert [b.evidence_key for b in packer.run(evidence_blocks=[first, short])["context_pack"].blocks] == [
            "first",
            "short",
        ]
        assert packer.run(evidence_blocks=[first, long])["context_pack"].omitted_evidence_keys == ["long"]

    def test_the_competitors_block_is_packed_whatever_the_blocks_before_it(self):
        reasons = REASONS
        blocks = [
            block("a0", 60, "Leader", reasons, "ops/a.md"),
            block("a1", 60, "Leader", reasons, "ops/a.md"),
            block("b0", 60, "Competitor", reasons, "ops/b.md"),
        ]
        packer = ContextPacker(budget_tokens=160)
        plain = packer.run(evidence_blocks=blocks)["context_pack"]
        assert "b0" in plain.omitted_evidence_keys
        competition = Competition("ops/a.md", "ops/b.md", 0.02, ["score margin 0.020 < 0.05"], evidence_key="b0")
        kept = packer.run(evidence_blocks=blocks, competition=competition)["context_pack"]
        assert "b0" in [b.evidence_key for b in kept.blocks] and "ops/b.md" in kept.included_sources
        assert kept.used_tokens <= 160

    def test_the_top_block_is_packed_before_a_lower_one_with_a_shorter_header(self):
        pack = ContextPacker(budget_tokens=100).run(evidence_blocks=[LONG_HEADER, SHORT_HEADER])["context_pack"]
        assert [b.evidence_key for b in pack.blocks][:1] == ["top"]
        assert pack.used_tokens <= 100 and count_tokens(MODEL, pack.text) <= 100
        assert pack.truncated and "[…]" in pack.text

    def test_a_budget_smaller_than_a_header_still_packs_the_top_block_within_it(self):
        for budget in (8, 30):
            pack = ContextPacker(budget_tokens=budget).run(evidence_blocks=[LONG_HEADER, SHORT_HEADER])["context_pack"]
            assert [b.evidence_key for b in pack.blocks] == ["top"]
            assert pack.text and pack.truncated and pack.included_sources == ["ops/top.md"]
            assert pack.used_tokens == count_tokens(MODEL, pack.text) <= budget
            assert pack.omitted_evidence_keys == ["second"]

    def test_content_is_truncated_never_the_metadata(self):
        reasons = ["vector:sdk attempt 0 (category='ops')", "l0_keyword: log rotation"]
        blocks = [
            block(f"k{i}", 400, f"Document {i}", reasons, f"ops/doc-{i}.md", f"Document {i} > Fix > Step {i}")
            for i in range(3)
        ]
        for budget in (80, 150, 400):
            pack = ContextPacker(budget_tokens=budget).run(evidence_blocks=blocks)["context_pack"]
            assert count_tokens(MODEL, pack.text) <= budget and pack.used_tokens <= budget
            assert pack.blocks and pack.truncated and pack.omitted_sources
            for packed in pack.blocks:
                assert packed.breadcrumb in pack.text and f"source: {packed.source}" in pack.text
                assert "; ".join(reasons) in pack.text
            assert pack.included_sources == [b.source for b in pack.blocks]
            assert pack.included_sources + pack.omitted_sources == [b.source for b in blocks]

    def test_headers_are_counted_by_word_exactly_and_once(self, monkeypatch):
        """Header words are counted once per packer; the sums equal the tokenizer's own counts."""
        titles = ["Kube Persistent Volume Filling Up", "磁盘空间不足  处理", "Résumé\tnaïve façade", "x" * 140]
        blocks = [
            block(
                f"k{i}",
                30,
                title,
                [f"vector:sdk attempt 0 (category='ops-{i}')", "l0_keyword: (a)--b"],
                f"ops/{title[:12]}.md",
                f"{title} > Fix\n  step {i}",
                count_tokens(MODEL, "word " * 30),
            )
            for i, title in enumerate(titles)
        ]
        packer = ContextPacker(budget_tokens=4000)
        pack = packer.run(evidence_blocks=blocks)["context_pack"]
        assert len(pack.blocks) == len(blocks)
        for text, packed in zip(pack.text.split("\n\n"), pack.blocks, strict=True):
            assert packed.tokens == count_tokens(MODEL, text)
        assert pack.used_tokens == count_tokens(MODEL, pack.text)
        encoded: list[str] = []
        original = packer._encode
        monkeypatch.setattr(packer, "_encode", lambda text: encoded.append(text) or original(text))
        assert packer.run(evidence_blocks=blocks)["context_pack"] == pack
        assert encoded == []

    def test_a_block_omitted_from_an_included_source_is_recorded(self):
        """Regression: a second block of an included source, cut by the budget, left no trace in the pack."""
        reasons = ["vector:sdk attempt 0 (unfiltered)"]
        blocks = [block("first", 40, "Doc", reasons, "ops/doc.md"), block("second", 100, "Doc", reasons, "ops/doc.md")]
        pack = ContextPacker(budget_tokens=90).run(evidence_blocks=blocks)["context_pack"]
        assert [b.evidence_key for b in pack.blocks] == ["first"] and not pack.truncated
        assert pack.included_sources == ["ops/doc.md"] and pack.omitted_sources == []
        assert pack.omitted_evidence_keys == ["second"]
        assert pack.to_dict()["omittedEvidenceKeys"] == ["second"] and pack.summary()["omitted_evidence_keys"] == [
            "second"
        ]
        hint = completeness_hint(blocks, pack, "high")
        assert hint.startswith("partial:") and "1 block(s) omitted" in hint


@pytest.fixture(scope="module")
def spaced_model(tmp_path_factory) -> str:
    """
    A tokenizer that makes every whitespace character a token of its own: separators cost tokens and
    counts do not add up across whitespace, so the packer counts joined texts again.
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s|\S+"), behavior="isolated")
    folder = tmp_path_factory.mktemp("spaced-model")
    tokenizer.save(str(folder / "tokenizer.json"))
    return str(folder)


def packed(budget: int, blocks: list[EvidenceBlock], model: str = MODEL, **inputs):
    return ContextPacker(budget_tokens=budget, tokenizer_model=model).run(evidence_blocks=blocks, **inputs)[
        "context_pack"
    ]


def pack_keys(pack) -> list[str]:
    return [b.evidence_key for b in pack.blocks]


class TestContextPackerBudget:
    """The token counts of a pack, under the packaged tokenizer and one whose separators cost tokens."""

    @pytest.mark.parametrize("model", [MODEL, "spaced"])
    @pytest.mark.parametrize("competing", [False, True])
    def test_run_counts_every_pack_as_its_tokenizer_does_within_the_budget(self, model, competing, spaced_model):
        model = spaced_model if model == "spaced" else model
        blocks = [
            block("a", 200, "A", REASONS, "ops/a.md"),
            block("b", 40, "B", [], "ops/b.md", tokens=count_tokens(model, "word " * 40)),
            block("c", 100, "C", REASONS, "ops/c.md", breadcrumb="C"),
        ]
        competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c") if competing else None
        separator = count_tokens(model, "\n\n")
        for budget in range(5, 800, 13):
            pack = packed(budget, blocks, model, competition=competition)
            assert pack.budget_tokens == budget
            assert pack.used_tokens == count_tokens(model, pack.text) <= budget
            assert pack.used_tokens == sum(b.tokens for b in pack.blocks) + separator * (len(pack.blocks) - 1)
            assert pack_keys(pack)[0] == "a"
        whole = packed(4000, blocks, model, competition=competition)
        assert pack_keys(whole) == ["a", "b", "c"] and not whole.truncated

    @pytest.mark.parametrize("budget", [5, 30, 60, 150])
    def test_run_cuts_the_top_block_to_the_budget_but_one_token(self, budget):
        pack = packed(budget, [block("a", 200, "A", REASONS), block("b", 200, "B", [])])
        assert (pack.used_tokens, pack.truncated, pack.omitted_evidence_keys) == (budget - 1, True, ["b"])
        assert pack.text.startswith("[1] A" if budget > 5 else "[")

    @pytest.mark.parametrize("budget", [3, 4])
    def test_run_leaves_a_cut_mark_alone_when_the_budget_holds_no_word(self, budget):
        pack = packed(budget, [block("a", 200, "A", REASONS)])
        assert (pack.text, pack.truncated) == ("[…]", True)

    def test_run_marks_a_top_block_cut_to_its_header_and_the_mark_as_truncated(self):
        header = packed(4000, [block("a", 0, "A", REASONS)]).used_tokens
        pack = packed(header + 4, [block("a", 200, "A", REASONS)])
        assert pack.text.endswith("\n[…]") and pack.truncated and pack.blocks[0].truncated

    def test_run_cuts_at_a_word_without_the_space_after_it(self, spaced_model):
        text = packed(60, [block("a", 200, "A", REASONS)], spaced_model).text
        assert text.endswith("word […]") and not text.endswith("  […]")

    @pytest.mark.parametrize("model", [MODEL, "spaced"])
    @pytest.mark.parametrize(
        ("words", "known"),
        [((30, 6), False), ((6,), False), ((6,), True)],
        ids=["two-blocks", "short-top-block", "short-top-block-tokens-known"],  # short: less than a stub's room
    )
    def test_run_packs_blocks_that_fit_exactly_whole(self, model, words, known, spaced_model):
        model = spaced_model if model == "spaced" else model
        blocks = [
            block(key, n, key.upper(), REASONS, tokens=count_tokens(model, "word " * n) if known else None)
            for key, n in zip("ab", words, strict=False)
        ]
        exact = packed(4000, blocks, model).used_tokens
        pack = packed(exact, blocks, model)
        assert (pack_keys(pack), pack.used_tokens, pack.truncated) == ([b.evidence_key for b in blocks], exact, False)

    def test_run_counts_the_line_break_after_a_header_when_its_tokenizer_does(self, spaced_model):
        blocks = [block("a", 30, "A", REASONS), block("b", 6, "B", REASONS)]
        exact = packed(4000, blocks, spaced_model).used_tokens
        pack = packed(exact - 1, blocks, spaced_model)
        assert pack.used_tokens == count_tokens(spaced_model, pack.text) <= exact - 1

    def test_run_packs_the_competitor_at_every_budget_with_room_for_both_headers_and_a_stub(self):
        top, between = block("a", 200, "A", REASONS, "ops/a.md"), block("b", 200, "B", [], "ops/b.md")
        rival = block("c", 100, "Competitor with a long title", [*REASONS, "l0_keyword: disk"], "ops/c.md")
        competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")
        headers = sum(
            packed(4000, [block(b.evidence_key, 0, b.title, b.hit_reasons)]).used_tokens for b in (top, rival)
        )
        for blocks in ([top, rival], [top, between, rival]):
            for budget in range(headers + 2 * 24, 400, 7):
                assert "c" in pack_keys(packed(budget, blocks, competition=competition)), budget

    @pytest.mark.parametrize("budget", [8, 20])
    def test_run_gives_the_top_block_a_budget_too_small_for_the_competitor_too(self, budget):
        blocks = [block("a", 200, "A", REASONS, "ops/a.md"), block("c", 100, "C", REASONS, "ops/c.md")]
        competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")
        pack = packed(budget, blocks, competition=competition)
        assert (pack_keys(pack), pack.used_tokens) == (["a"], budget - 1)

    def test_run_cuts_a_lower_block_with_a_stubs_room_and_omits_it_with_less(self):
        first = block("a", 30, "A", REASONS)
        alone = packed(4000, [first]).used_tokens
        header = packed(4000, [first, block("b", 5, "B", REASONS)]).used_tokens - alone - 5
        blocks = [first, block("b", 100, "B", REASONS)]
        stub = packed(alone + header + 24, blocks)
        assert (pack_keys(stub), stub.truncated, stub.used_tokens) == (["a", "b"], True, alone + header + 23)
        assert packed(alone + header + 23, blocks).omitted_evidence_keys == ["b"]

    @pytest.mark.parametrize(
        ("title", "breadcrumb", "first_line"),
        [
            ("Disk Full", "Disk Full > Fix", "[1] Disk Full › Disk Full > Fix"),
            ("Disk Full", "Disk Full", "[1] Disk Full"),  # a breadcrumb that is the title alone adds nothing
            (None, None, "[1] ops/a.md"),  # no title: the source
        ],
    )
    def test_run_heads_each_block_with_its_title_breadcrumb_source_and_reasons(self, title, breadcrumb, first_line):
        chunk = block("a", 5, "", ["semantic", "l0_title: disk"], "ops/a.md")
        chunk = EvidenceBlock(**{**chunk.__dict__, "title": title, "breadcrumb": breadcrumb})
        text = packed(4000, [chunk]).text
        assert text == f"{first_line}\nsource: ops/a.md | score 0.800 | why: semantic; l0_title: disk\n{'word ' * 5}"

    def test_run_records_each_packed_block(self):
        chunk = block("a", 200, "A", REASONS, "ops/a.md")
        pack = packed(60, [chunk])
        assert pack.blocks == [PackedBlock("a", "ops/a.md", "A", "A > Fix", REASONS, 59, True)]


@pytest.fixture(scope="module")
def merging_model(tmp_path_factory) -> str:
    """
    A tokenizer whose counts do not add up, as a BPE's need not: words are pieces of two letters, but
    a word right before the cut mark splits into letters (so a cut re-encodes to more tokens than it
    kept), and a block separator merges with the next header's bracket into one token (so a pack
    counts less than its parts).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n\n\[|\S(?=\S* \[…\])|\s|\S{1,2}"), behavior="isolated")
    folder = tmp_path_factory.mktemp("merging-model")
    tokenizer.save(str(folder / "tokenizer.json"))
    return str(folder)


class TestContextPackerMergingTokenizer:
    """Packs under a tokenizer whose cuts grow when encoded again and whose separators merge."""

    def test_run_cuts_the_top_block_at_the_last_token_whose_cut_fits_the_budget_but_one(self, merging_model):
        top = block("a", 200, "A", REASONS)
        head = packed(4000, [block("a", 0, "A", REASONS)], merging_model).text
        ends = [end for _, end in load_tokenizer(merging_model).encode(top.content, add_special_tokens=False).offsets]
        cuts = [
            (count_tokens(merging_model, head + cut), cut)
            for cut in (top.content[:end].rstrip() + " […]" for end in ends)
        ]
        for budget in range(count_tokens(merging_model, head) + 8, 120):
            longest = [cut for tokens, cut in cuts if tokens < budget][-1]
            pack = packed(budget, [top], merging_model)
            assert (pack.text, pack.truncated) == (head + longest, True), budget
            assert pack.used_tokens == count_tokens(merging_model, pack.text) < budget

    def test_run_counts_the_joined_pack_not_the_sum_of_its_blocks(self, merging_model):
        blocks = [block("a", 10, "A", REASONS), block("b", 10, "B", REASONS)]
        pack = packed(4000, blocks, merging_model)
        separator = count_tokens(merging_model, "\n\n")
        assert pack_keys(pack) == ["a", "b"]
        assert (
            pack.used_tokens == count_tokens(merging_model, pack.text) < sum(b.tokens for b in pack.blocks) + separator
        )


@pytest.fixture(scope="module")
def breaking_model(tmp_path_factory) -> str:
    """
    A tokenizer whose content counts more after a header's line break than alone: words are pieces
    of two letters, but the first word after a line break splits into letters ("word" 2 tokens
    alone, 4 after a header).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    after_break = r"(?<=\n)\S|(?<=\n\S)\S|(?<=\n\S\S)\S|(?<=\n\S\S\S)\S"  # a lookbehind has one length
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(after_break + r"|\s|\S{1,2}"), behavior="isolated")
    folder = tmp_path_factory.mktemp("breaking-model")
    tokenizer.save(str(folder / "tokenizer.json"))
    return str(folder)


class TestContextPackerBreakingTokenizer:
    """Packs under a tokenizer whose content counts more after its header than alone."""

    def test_the_tokenizer_counts_content_after_a_header_as_more_than_alone(self, breaking_model):
        head = packed(4000, [block("a", 0, "A", REASONS)], breaking_model).text
        content = block("a", 5, "A", REASONS).content
        assert count_tokens(breaking_model, head + content) == count_tokens(breaking_model, head) + 15 + 2

    def test_run_cuts_the_top_block_to_the_budget_counted_with_its_header(self, breaking_model):
        """Regression: a block cut with 24 tokens of room or more came out 1 to 2 tokens over the budget."""
        top = block("a", 200, "A", REASONS)
        header = packed(4000, [block("a", 0, "A", REASONS)], breaking_model).used_tokens
        for budget in range(header + 24, header + 200):
            pack = packed(budget, [top], breaking_model)
            assert pack.used_tokens == count_tokens(breaking_model, pack.text) <= budget, budget
            assert pack.truncated and pack.text.endswith(" […]")

    def test_run_cuts_a_block_that_fits_whole_only_counted_without_its_header(self, breaking_model):
        first, second = block("a", 30, "A", REASONS), block("b", 40, "B", REASONS, tokens=80)
        alone = packed(4000, [first], breaking_model).used_tokens
        header = packed(4000, [block("b", 0, "B", REASONS)], breaking_model).text.replace("[1]", "[2]")
        budget = alone + count_tokens(breaking_model, "\n\n" + header) + 80  # the sum of the parts
        pack = packed(budget, [first, second], breaking_model)
        assert pack_keys(pack) == ["a", "b"] and pack.blocks[1].truncated
        assert pack.used_tokens == count_tokens(breaking_model, pack.text) <= budget

    def test_run_omits_a_short_block_that_fits_only_counted_without_its_header(self, breaking_model):
        first, short = block("a", 30, "A", REASONS), block("b", 3, "B", REASONS)
        exact = packed(4000, [first, short], breaking_model).used_tokens
        pack = packed(exact - 1, [first, short], breaking_model)
        assert (pack_keys(pack), pack.omitted_evidence_keys) == (["a"], ["b"])

    @pytest.mark.parametrize("between", [0, 1])
    def test_run_packs_the_competitor_within_the_budget_counted_with_its_header(self, breaking_model, between):
        top, rival = block("a", 200, "A", REASONS, "ops/a.md"), block("c", 100, "C", REASONS, "ops/c.md")
        blocks = [top, *[block("b", 200, "B", [], "ops/b.md")] * between, rival]
        competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")
        headers = sum(
            packed(4000, [block(b.evidence_key, 0, b.title, REASONS)], breaking_model).used_tokens for b in (top, rival)
        )
        for budget in range(headers + 2 * 24, headers + 200):
            pack = packed(budget, blocks, breaking_model, competition=competition)
            assert "c" in pack_keys(pack), budget
            assert pack.used_tokens == count_tokens(breaking_model, pack.text) <= budget, budget


@pytest.mark.parametrize("model", [MODEL, "spaced", "merging", "breaking"])
@pytest.mark.parametrize("competing", [False, True])
def test_run_never_packs_more_than_the_budget_counted_on_the_joined_pack(model, competing, request):
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    blocks = [
        block("a", 120, "A", REASONS, "ops/a.md"),
        block("b", 4, "B", [], "ops/b.md"),
        block("c", 60, "Competitor with a longer title", REASONS, "ops/c.md", tokens=count_tokens(model, "word " * 60)),
        block("d", 30, "D", REASONS, "ops/d.md"),
    ]
    competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c") if competing else None
    for budget in [*range(1, 260), 400, 4000]:
        pack = packed(budget, blocks, model, competition=competition)
        assert pack.used_tokens == count_tokens(model, pack.text) <= budget, budget
        assert pack_keys(pack)[0] == "a"
        assert sorted(pack_keys(pack) + pack.omitted_evidence_keys) == ["a", "b", "c", "d"]


def competing_pair(top_words: int = 200) -> tuple[list[EvidenceBlock], Competition]:
    blocks = [block("a", top_words, "A", REASONS, "ops/a.md"), block("c", 100, "C", REASONS, "ops/c.md")]
    return blocks, Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")


def reserve_of_the_competitor(model: str) -> int:
    """Its header as packed second, the separator before it and a stub's 24 tokens."""
    header = packed(4000, [block("c", 0, "C", REASONS, "ops/c.md")], model).text.replace("[1]", "[2]", 1)
    return count_tokens(model, header) + count_tokens(model, "\n\n") + 24


@pytest.mark.parametrize("model", [MODEL, "spaced", "merging", "breaking"])
def test_run_leaves_the_competitor_its_header_and_a_stubs_room(model, request):
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    blocks, competition = competing_pair()
    header = packed(4000, [block("a", 0, "A", REASONS, "ops/a.md")], model).used_tokens
    reserve = reserve_of_the_competitor(model)
    for budget in range(header + reserve + 1, header + reserve + 120):
        pack = packed(budget, blocks, model, competition=competition)
        assert pack_keys(pack) == ["a", "c"], budget
        assert pack.blocks[0].tokens <= budget - reserve, budget


def test_run_cuts_the_top_block_to_what_the_competitors_room_leaves_but_one(merging_model):
    blocks, competition = competing_pair()
    head = packed(4000, [block("a", 0, "A", REASONS, "ops/a.md")], merging_model).text
    reserve = reserve_of_the_competitor(merging_model)
    ends = [end for _, end in load_tokenizer(merging_model).encode(blocks[0].content, add_special_tokens=False).offsets]
    cuts = [
        (count_tokens(merging_model, head + cut), cut)
        for cut in (blocks[0].content[:end].rstrip() + " […]" for end in ends)
    ]
    for budget in range(count_tokens(merging_model, head) + reserve + 8, 240):
        longest = [cut for tokens, cut in cuts if tokens < budget - reserve][-1]
        pack = packed(budget, blocks, merging_model, competition=competition)
        assert pack.text.split("\n\n")[0] == head + longest, budget


def test_run_keeps_the_top_blocks_header_whole_where_holding_the_competitors_room_would_cut_it():
    blocks, competition = competing_pair()
    head = packed(4000, [block("a", 0, "A", REASONS, "ops/a.md")]).text
    budget = count_tokens(MODEL, head) + reserve_of_the_competitor(MODEL)  # the header and no token more
    pack = packed(budget, blocks, competition=competition)
    assert pack.text.startswith(head) and pack_keys(pack) == ["a"]


def test_run_packs_a_short_block_of_known_tokens_in_exactly_its_room():
    first, short = block("a", 30, "A", REASONS), block("b", 6, "B", REASONS, tokens=count_tokens(MODEL, "word " * 6))
    exact = packed(4000, [first, short]).used_tokens
    assert pack_keys(packed(exact, [first, short])) == ["a", "b"]
    assert pack_keys(packed(exact - 1, [first, short])) == ["a"]


@pytest.mark.parametrize("model", [MODEL, "spaced"])
def test_run_encodes_each_content_once_at_most_and_only_when_its_count_is_needed(model, request, monkeypatch):
    """
    No text is encoded twice in a run, a content of known tokens that fits is not encoded, and with
    a whitespace-splitting tokenizer no block is encoded joined to its header, nor an empty word.
    """
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    known = count_tokens(model, "word " * 5)
    blocks = [
        block("a", 200, "A", REASONS, "ops/a.md"),
        block("b", 5, "B", REASONS, "ops/b.md", tokens=known),
        block("c", 4, "C", REASONS, "ops/c.md"),
        block("d", 190, "D", REASONS, "ops/d.md"),
    ]
    small = [block("a", 3, "A", REASONS, "ops/a.md", tokens=count_tokens(model, "word " * 3)), *blocks[1:]]
    packer = ContextPacker(budget_tokens=4000, tokenizer_model=model)
    header = packer.run(evidence_blocks=[block("a", 0, "A", REASONS)])["context_pack"].used_tokens
    encoded: list[str] = []
    original = packer._encode
    monkeypatch.setattr(packer, "_encode", lambda text: encoded.append(text) or original(text))
    for budget in range(header + 4, header + 260):
        for run_blocks in (blocks, small):
            packer.budget_tokens = budget
            encoded.clear()
            pack = packer.run(evidence_blocks=run_blocks)["context_pack"]
            assert pack.used_tokens <= budget
            fitting = {b.content for b in run_blocks if b.tokens and b.tokens <= budget - header}
            assert "" not in encoded and not fitting & set(encoded), budget
            assert all(encoded.count(b.content) <= 1 for b in run_blocks), budget
            if model == MODEL and budget >= header + 24:
                assert not [text for text in encoded if "\nsource: " in text], budget
                cut_tries = [t for t in encoded if t.endswith(" […]") and t != " […]"]
                assert len(cut_tries) == sum(b.truncated for b in pack.blocks), budget


@pytest.mark.parametrize(
    ("model", "room", "kept"), [(MODEL, 1, False), (MODEL, 2, False), (MODEL, 3, True), ("spaced", 1, True)]
)
def test_run_packs_the_competitor_cut_to_the_mark_alone_only_where_the_mark_fits(model, room, kept, request):
    """Regression: with less room than the cut mark's tokens the competitor came out over the budget."""
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    top, rival = block("a", 5, "A", REASONS, "ops/a.md"), block("c", 100, "C", REASONS, "ops/c.md")
    competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")
    alone = packed(4000, [top], model).used_tokens
    header = packed(4000, [block("c", 0, "C", REASONS, "ops/c.md")], model).used_tokens
    budget = alone + count_tokens(model, "\n\n") + header + room
    pack = packed(budget, [top, rival], model, competition=competition)
    assert pack.used_tokens == count_tokens(model, pack.text) <= budget
    assert pack_keys(pack) == (["a", "c"] if kept else ["a"])
    assert pack.text.endswith("\n[…]") == kept


@pytest.mark.parametrize("budget", [1, 2])
def test_run_packs_nothing_of_the_top_block_when_even_the_cut_mark_is_over_the_budget(budget):
    pack = packed(budget, [block("a", 200, "A", REASONS, "ops/a.md")])
    assert (pack.text, pack.used_tokens, pack.truncated, pack_keys(pack)) == ("", 0, True, ["a"])
    assert pack.included_sources == ["ops/a.md"]


def bert_tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_str(load_tokenizer(MODEL).to_str())


class TestSplitsAtWhitespace:
    def test_the_packaged_tokenizer_splits_at_whitespace(self):
        assert splits_at_whitespace(bert_tokenizer()) is True

    def test_a_bert_tokenizer_without_a_normalizer_splits_at_whitespace(self):
        tokenizer = bert_tokenizer()
        tokenizer.normalizer = None
        assert splits_at_whitespace(tokenizer) is True

    def test_another_pre_tokenizer_does_not(self):
        from tokenizers import pre_tokenizers

        tokenizer = bert_tokenizer()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        assert splits_at_whitespace(tokenizer) is False

    def test_another_normalizer_does_not(self):
        from tokenizers import normalizers

        tokenizer = bert_tokenizer()
        tokenizer.normalizer = normalizers.Lowercase()
        assert splits_at_whitespace(tokenizer) is False

    @pytest.mark.parametrize(
        "token", [{"content": "<x>", "lstrip": True}, {"content": "<x>", "rstrip": True}, {"content": "a b"}]
    )
    def test_an_added_token_that_absorbs_or_holds_whitespace_does_not(self, token):
        from tokenizers import AddedToken

        tokenizer = bert_tokenizer()
        tokenizer.add_tokens([AddedToken(**token)])
        assert splits_at_whitespace(tokenizer) is False


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("budget_tokens", 0, "at least 1"),
    ("tokenizer_model", "", "non-empty"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: ContextPacker(**{**{}, **changed}), parameter, value, rule)


@pytest.mark.parametrize("model", [MODEL, "spaced", "merging", "breaking"])
def test_run_marks_a_top_block_packed_whole_untruncated_where_the_competitors_room_is_dropped(model, request):
    """Regression: the top block, packed whole in the budget the competitor's room left it, was marked truncated."""
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    top, rival = block("a", 3, "A", REASONS, "ops/a.md"), block("c", 100, "C", REASONS, "ops/c.md")
    competition = Competition("ops/a.md", "ops/c.md", 0.02, ["margin"], evidence_key="c")
    alone = packed(4000, [top], model)
    pack = packed(alone.used_tokens, [top, rival], model, competition=competition)
    assert pack.text == alone.text and pack_keys(pack) == ["a"]
    assert not pack.truncated and not pack.blocks[0].truncated


@pytest.mark.parametrize("model", [MODEL, "spaced"])
def test_run_packs_the_top_blocks_header_and_the_cut_mark_in_exactly_their_tokens(model, request):
    """The header stays whole where it and the mark alone fill the budget to its last token."""
    model = model if model == MODEL else request.getfixturevalue(f"{model}_model")
    head = packed(4000, [block("a", 0, "A", REASONS)], model).text
    budget = count_tokens(model, head + "[…]")
    pack = packed(budget, [block("a", 200, "A", REASONS)], model)
    assert (pack.text, pack.used_tokens, pack.truncated) == (head + "[…]", budget, True)
