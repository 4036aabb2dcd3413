"""Profiles: chosen by ADAPTERLAB_PROFILE, frozen, and an unknown name is a clear error."""

from __future__ import annotations

import dataclasses

import pytest

from adapterlab import backbones, profiles


@pytest.fixture(autouse=True)
def backbone_answer(monkeypatch):
    """Which backbone will load, decided by the test (no cache lookup, no hub probe); reset per test."""
    answer = {"backbone": backbones.STANDIN}
    monkeypatch.setattr(profiles, "expected_backbone", lambda name, fallback=True: (
        answer["backbone"] if name == backbones.BERT_BASE and fallback else name))
    profiles._expected_backbone.cache_clear()
    yield answer
    profiles._expected_backbone.cache_clear()


def test_default_is_student(monkeypatch):
    monkeypatch.delenv("ADAPTERLAB_PROFILE", raising=False)
    assert profiles.current_profile().name == "student"
    monkeypatch.setenv("ADAPTERLAB_PROFILE", "")
    assert profiles.current_profile().name == "student"


def test_ci_by_environment(monkeypatch):
    monkeypatch.setenv("ADAPTERLAB_PROFILE", " CI ")
    profile = profiles.current_profile()
    assert profile.name == "ci" and profile.max_train is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.steps = 1


def test_unknown_profile_names_the_choices(monkeypatch):
    monkeypatch.setenv("ADAPTERLAB_PROFILE", "fast")
    with pytest.raises(ValueError, match=r"unknown profile 'fast'.*ADAPTERLAB_PROFILE must be one of student, ci"):
        profiles.current_profile()


def test_profiles_have_the_same_fields_and_ci_is_smaller():
    student, ci = profiles.get_profile("student"), profiles.get_profile("ci")
    assert [f for f, _ in student.as_rows()] == [f for f, _ in ci.as_rows()]
    assert ci.steps < student.steps and ci.probe_sentences <= student.probe_sentences


@pytest.mark.parametrize("name", ["student", "ci"])
def test_init_scales_span_the_papers_range_and_hold_both_defaults(name):
    scales = profiles.init_scales(profiles.get_profile(name))
    assert scales[0] == pytest.approx(1e-7) and scales[-1] == pytest.approx(1.0)
    assert 1e-3 in scales and 1e-2 in scales
    assert scales == sorted(set(scales))


def test_student_sizes_follow_the_backbone_that_will_load(monkeypatch, backbone_answer):
    """A bert-base step costs 5-7 stand-in steps: with bert-base the training runs are shorter;
    when the stand-in loads instead, the profile carries the stand-in's (longer) sizes and says so."""
    monkeypatch.delenv("ADAPTERLAB_PROFILE", raising=False)
    backbone_answer["backbone"] = backbones.BERT_BASE
    bert = profiles.current_profile()
    assert bert.sized_for == backbones.BERT_BASE and bert == profiles.get_profile("student")
    profiles._expected_backbone.cache_clear()
    backbone_answer["backbone"] = backbones.STANDIN
    standin = profiles.current_profile()
    assert standin.sized_for == backbones.STANDIN and standin.backbone == backbones.BERT_BASE
    for field, value in profiles.get_profile("student").standin_sizes:
        assert getattr(standin, field) == value
    assert standin.steps > bert.steps and standin.sweep_steps > bert.sweep_steps
    assert standin.panel_steps > bert.panel_steps
    assert standin.for_backbone(backbones.STANDIN) is standin  # applying twice changes nothing


def test_the_ci_profile_is_sized_for_the_standin_it_asks_for():
    ci = profiles.get_profile("ci")
    assert ci.sized_for == ci.backbone == backbones.STANDIN and ci.standin_sizes == ()
    assert ci.for_backbone(backbones.STANDIN) is ci


def test_variants_list_every_profile_as_it_can_run():
    variants = profiles.variants()
    assert list(variants) == [f"student ({backbones.BERT_BASE})", f"student ({backbones.STANDIN})",
                              f"ci ({backbones.STANDIN})"]
    assert [v.sized_for for v in variants.values()] == [backbones.BERT_BASE, backbones.STANDIN, backbones.STANDIN]
    rows = [dict(v.as_rows()) for v in variants.values()]
    assert all("standin_sizes" not in r and "steps" in r for r in rows)
