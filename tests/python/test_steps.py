"""steps(iterable): the semantics of the C++ stepscope::steps adaptor — one step
per item, each fetch (iter() for the first item, next() after) that step's
data phase, a fetch that ends the iteration a data phase outside any step,
and the last step closed by the end of the loop (break, an exception, the
iterator dropped; left out when its body recorded nothing). Counts only, read
back through snapshot()."""

import gc
import threading

import pytest

import stepscope
import stepscope.torch


def counts():
    report = stepscope.snapshot()
    data_in = sum(p["count"] for p in report["phases"] if p["name"] == "data" and p["thread_role"] == "step")
    data_out = sum(p["count"] for p in report["phases"] if p["name"] == "data" and p["thread_role"] == "outside_step")
    return report["steps"]["count"], data_in, data_out


def delta(before):
    now = counts()
    return tuple(n - b for n, b in zip(now, before))


def balanced():
    return stepscope._core.thread_depth() == 0


def test_each_item_is_a_step_and_the_final_fetch_is_outside_any_step():
    before = counts()
    items = list(stepscope.steps([10, 20, 30, 40]))
    assert items == [10, 20, 30, 40]
    assert delta(before) == (4, 4, 1)
    assert balanced()


def test_an_empty_iterable_records_one_fetch_and_no_step():
    before = counts()
    assert list(stepscope.steps([])) == []
    assert delta(before) == (0, 0, 1)
    assert balanced()


def test_a_generator_is_fetched_once_per_item():
    pulled = []

    def gen():
        for i in range(6):
            pulled.append(i)
            yield i

    before = counts()
    for _ in stepscope.steps(gen()):
        pass
    assert pulled == list(range(6))
    assert delta(before) == (6, 6, 1)


def unended():
    return stepscope.snapshot()["steps"]["unended_excluded"]


def test_break_closes_the_open_step_when_the_iterator_is_dropped():
    before, left_out = counts(), unended()
    for i in stepscope.steps(range(100)):
        with stepscope.phase("forward"):
            pass
        if i == 2:
            break
    gc.collect()  # CPython drops the loop's iterator at once; be sure
    assert delta(before) == (3, 3, 0)
    assert unended() == left_out
    assert balanced()


def test_a_step_left_before_its_body_recorded_anything_is_counted_and_left_out():
    # `if step == max_steps: break` at the top of the body: the last step
    # fetched an item and did nothing; read as a step it would be ~0 ms.
    before, left_out = counts(), unended()
    for i in stepscope.steps(range(100)):
        if i == 3:
            break
        with stepscope.phase("forward"):
            pass
    gc.collect()
    assert delta(before) == (3, 4, 0)
    assert unended() == left_out + 1
    # The loop's only step is kept: nothing says it is not a whole one.
    before, left_out = counts(), unended()
    for _ in stepscope.steps(range(100)):
        break
    gc.collect()
    assert delta(before) == (1, 1, 0)
    assert unended() == left_out
    assert balanced()


def test_close_ends_the_step_now():
    before = counts()
    it = stepscope.steps(range(100))
    next(it)
    next(it)
    with stepscope.phase("forward"):
        pass
    it.close()
    assert delta(before) == (2, 2, 0)
    assert balanced()
    with pytest.raises(StopIteration):
        next(it)


def test_an_exception_in_the_body_closes_the_step_and_propagates():
    before = counts()
    with pytest.raises(RuntimeError):
        for i in stepscope.steps(range(10)):
            with stepscope.phase("forward"):
                if i == 1:
                    raise RuntimeError("in the body")
    gc.collect()
    assert delta(before) == (2, 2, 0)
    assert balanced()


def test_an_exception_in_the_fetch_is_a_data_phase_outside_steps_and_propagates():
    def gen():
        yield 1
        raise OSError("disk gone")

    before = counts()
    with pytest.raises(OSError):
        for _ in stepscope.steps(gen()):
            pass
    assert delta(before) == (1, 1, 1)
    assert balanced()


def test_phases_in_the_body_belong_to_the_step():
    before = stepscope.snapshot()
    for _ in stepscope.steps(range(5)):
        with stepscope.phase("steps.body"):
            pass
    after = stepscope.snapshot()
    rows = [p for p in after["phases"] if p["name"] == "steps.body"]
    assert [(p["thread_role"], p["count"]) for p in rows] == [("step", 5)]
    assert after["steps"]["count"] - before["steps"]["count"] == 5


def test_steps_do_not_nest_the_inner_loop_or_scope_is_the_step():
    # An epoch loop of steps() around a batch loop of steps(), then a
    # with stepscope.step() inside a steps() loop: the inner ones are the
    # steps, the outer ones loops of steps, counted apart.
    before = stepscope.snapshot()["steps"]
    for _ in stepscope.steps(range(3)):
        for _ in stepscope.steps(range(4)):
            with stepscope.phase("nest.body"):
                pass
        with stepscope.phase("nest.evaluate"):
            pass
    for _ in stepscope.steps(range(5)):
        with stepscope.step():
            pass
    after = stepscope.snapshot()
    steps = after["steps"]
    assert steps["count"] + steps["warmup_excluded"] - before["count"] - before["warmup_excluded"] == 12 + 5
    assert steps["outer_excluded"] - before["outer_excluded"] == 3 + 5
    roles = {(p["name"], p["thread_role"]): p["count"] for p in after["phases"] if p["name"].startswith("nest.")}
    assert roles == {("nest.body", "step"): 12, ("nest.evaluate", "outside_step"): 3}
    assert balanced()
    # next_step() inside a steps() loop would overlap its steps: it does nothing, counted.
    for _ in stepscope.steps(range(4)):
        stepscope.next_step()
    again = stepscope.snapshot()["steps"]
    assert again["next_step_ignored"] - after["steps"]["next_step_ignored"] == 4
    assert again["count"] + again["warmup_excluded"] - steps["count"] - steps["warmup_excluded"] == 4
    assert balanced()
    # Two steps() loops zipped: one step a pair (the second loop's), both fetches data.
    before_zip = counts()
    for _ in zip(stepscope.steps(range(5)), stepscope.steps(range(5))):
        pass
    steps_made, data_in, data_out = delta(before_zip)
    assert steps_made == 5
    assert data_in + data_out == 11
    assert stepscope.snapshot()["steps"]["outer_excluded"] - again["outer_excluded"] == 1
    assert balanced()


def test_torch_steps_over_a_dataloader_records_its_settings():
    import torch

    data = torch.utils.data.TensorDataset(torch.arange(20.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    before = counts()
    batches = [b[0].tolist() for b in stepscope.torch.steps(loader)]
    assert len(batches) == 5 and batches[0] == [0.0, 1.0, 2.0, 3.0]
    assert delta(before) == (5, 5, 1)
    config = stepscope.snapshot()["run"]["config"]
    assert config["num_workers"] == 0 and config["batch_size"] == 4
    assert config["intra_op_threads"] == torch.get_num_threads()


def test_a_loop_on_another_thread_has_its_own_steps():
    result = {}

    def loop():
        before = counts()
        for _ in stepscope.steps(range(3)):
            pass
        result["delta"] = delta(before)

    t = threading.Thread(target=loop)
    t.start()
    t.join()
    assert result["delta"] == (3, 3, 1)
