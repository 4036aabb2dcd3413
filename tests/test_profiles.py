"""Profiles: chosen by ADAPTERLAB_PROFILE, frozen, and an unknown name is a clear error."""

from __future__ import annotations

import dataclasses

import pytest

from adapterlab import profiles


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
