"""Golden journeys of the communication contract, played by the official Python MCP SDK over
real Streamable HTTP. The integration test binary (tests/it/mcp_journeys.rs) starts the
service, creates a learner with a started session and runs one journey:

    python golden.py --url http://127.0.0.1:PORT/mcp --token BEARER --journey a [--mode auto|legacy]

`--mode auto` (the SDK's default `Client`) probes `server/discover` and speaks the 2026-07-28
revision; `--mode legacy` uses the initialize handshake (`ClientSession.initialize()`).

The script acts as the coach: one fresh context per learner turn, at most one mutation from it,
a render call only when a continuation carries its toolCall. It asserts the exact tool calls
per turn and prints one JSON document (calls, results) for the Rust side's privacy scan.
It exits non-zero on the first broken expectation.
"""

import argparse
import asyncio
import json
import sys
import uuid

from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class Coach:
    def __init__(self, session: ClientSession):
        self.session = session
        self.sid = None
        self.calls = []
        self.results = []
        self.turns = []

    async def call(self, name, arguments=None, expect_error=False):
        args = dict(arguments or {})
        if self.sid is not None:
            args["learningSessionId"] = self.sid
        result = await self.session.call_tool(name, args)
        self.calls.append(name)
        self.turns[-1].append(name)
        sc = result.structured_content
        self.results.append({"tool": name, "structured": sc, "content": [c.text for c in result.content if hasattr(c, "text")], "meta": result.meta})
        if expect_error:
            check(result.is_error, f"{name} should fail")
        else:
            check(not result.is_error, f"{name} failed: {json.dumps(sc)}")
        check(isinstance(sc, dict) and "outcome" in sc, f"{name}: outcome missing")
        check_one_imperative(name, sc)
        return sc

    async def turn(self):
        """A new learner message: exactly one fresh context."""
        self.turns.append([])
        ctx = await self.call("get_skillpilot_learning_context")
        if self.sid is None:
            check("learningSessionId" in ctx, "the gate call returns the session id")
            self.sid = ctx["learningSessionId"]
        else:
            check("learningSessionId" not in ctx, "only the gate call carries the session id")
        return ctx

    async def follow(self, result):
        """Follow a continuation's render toolCall exactly once, unchanged."""
        cont = result.get("continuation") or {}
        call = cont.get("toolCall")
        if call:
            check(cont["action"] == "renderGoalVisualizationThenTeachActiveGoal", "render toolCall only with the render action")
            rendered = await self.call(call["name"], call["arguments"])
            check(rendered == {"outcome": "completed", "rendered": True}, f"narrow render receipt: {rendered}")
            check(self.results[-1]["meta"] and "skillpilot/goalPicture" in self.results[-1]["meta"], "picture in _meta")
        return result

    async def begin(self):
        """The first turn: the learner wants to begin; the first goal comes with its picture."""
        ctx = await self.turn()
        check(ctx["requiredAction"] == "awaitLearnerContinuation", "a fresh journey waits for the wish to begin")
        check("activeGoal" not in ctx, "nothing is presented before the learner wants to begin")
        begun = await self.follow(await self.call("choose_skillpilot_option", {"option": self.option(ctx, "continue")}))
        check(begun["continuation"]["action"] == "renderGoalVisualizationThenTeachActiveGoal", "the first goal's picture, then teaching")
        check(begun["context"]["activeGoal"]["title"] == "Was ein Bruch bedeutet", "the first goal is taught")
        return begun

    def option(self, ctx, kind, **match):
        pool = ctx.get("options", []) + ctx.get("settings", {}).get("options", [])
        for o in pool:
            if o["kind"] == kind and all(o.get(k) == v for k, v in match.items()):
                return o["payload"]
        fail(f"no {kind} option {match} in {json.dumps(pool)}")


def check(condition, message):
    if not condition:
        fail(message)


def fail(message):
    print(f"golden journey failed: {message}", file=sys.stderr)
    raise SystemExit(1)


IMPERATIVE = {"requiredAction", "continuation", "recovery"}
FORBIDDEN_CHANNELS = {"next", "nextStep", "presentationAction", "nextAllowedTools"}


def check_one_imperative(name, sc):
    keys = set(sc)
    check(not (keys & FORBIDDEN_CHANNELS), f"{name}: side channel {keys & FORBIDDEN_CHANNELS}")
    channels = [k for k in ("requiredAction", "continuation") if k in sc]
    if sc.get("outcome") in ("rejected", "error"):
        check(not channels, f"{name}: an error carries only its recovery")
        return
    if name == "render_skillpilot_goal_visualization":
        check(not channels, "the render receipt carries no imperative")
        return
    check(len(channels) == 1, f"{name}: exactly one imperative channel, got {channels}")
    if "continuation" in sc:
        check("consentRequired" in sc["continuation"], "consentRequired is always present")
        inner = sc.get("context", {})
        check("requiredAction" not in inner and "instruction" not in inner, f"{name}: the factual context has no second imperative")
    else:
        check("instruction" in sc, "requiredAction comes with its instruction")


def decision(evidence="independent", consent="closeAndContinue"):
    return {"evidence": evidence, "consent": consent}


async def complete(coach, ctx, **kw):
    return await coach.call(
        "complete_skillpilot_goal",
        {"expectedStateVersion": ctx["stateVersion"], "clientRequestId": str(uuid.uuid4()), "decision": decision(**kw)},
    )


async def journey_a(coach):
    """First turn → begin (picture) → teach → complete (closeAndContinue) → mode choice → learn → goal → taught with its picture."""
    await coach.begin()
    ctx = await coach.turn()
    check(ctx["requiredAction"] == "teachActiveGoal", "the begun goal is taught")
    done = await complete(coach, ctx)
    check(done["receipt"]["stored"] == "goalCompleted" and done["receipt"]["mastery"] == 0.8, "receipt with backend mastery")
    check(done["requiredAction"] == "chooseOption", "due cards and a next goal: a mode choice")
    check(sorted(o["mode"] for o in done["options"]) == ["learn", "verifiedRecall"], "two mode options")
    check(done["recall"]["dueCards"] == 3, "the completed goal's cards are due at once")
    ctx = await coach.turn()
    chosen = await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "mode", mode="learn")})
    check(chosen["requiredAction"] == "chooseOption" and len(chosen["options"]) == 2, "two next goals: a goal choice")
    ctx = await coach.turn()
    title = next(o["title"] for o in ctx["options"] if o["kind"] == "goal" and "Erweitern" in o["title"])
    result = await coach.follow(await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "goal", title=title)}))
    check(result["context"]["activeGoal"]["title"] == title, "the chosen successor is taught")
    check(coach.turns == [
        ["get_skillpilot_learning_context", "choose_skillpilot_option", "render_skillpilot_goal_visualization"],
        ["get_skillpilot_learning_context", "complete_skillpilot_goal"],
        ["get_skillpilot_learning_context", "choose_skillpilot_option"],
        ["get_skillpilot_learning_context", "choose_skillpilot_option", "render_skillpilot_goal_visualization"],
    ], f"tool calls per turn: {coach.turns}")


async def journey_b(coach):
    """closeOnly keeps the successor unpresented until the learner continues."""
    await coach.begin()
    ctx = await coach.turn()
    done = await complete(coach, ctx, consent="closeOnly")
    check(done["requiredAction"] == "awaitLearnerContinuation", "closeOnly waits")
    check("activeGoal" not in done, "no successor content before the learner continues")
    check([o["kind"] for o in done["options"]] == ["continue"], "only the continue option")
    ctx = await coach.turn()
    check(ctx["requiredAction"] == "awaitLearnerContinuation", "still waiting on the next turn")
    went_on = await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "continue")})
    check(went_on["requiredAction"] == "chooseOption", "continue leads to the mode choice")
    check(went_on["receipt"]["stored"] == "optionChosen", "the choice has a receipt")
    check(len(coach.calls) == 7, f"seven calls: {coach.calls}")


async def journey_c(coach):
    """Verified recall over three learner turns, ending in a successor with a picture."""
    await coach.begin()
    ctx = await coach.turn()
    await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "autopilot", autopilot=True)})
    ctx = await coach.turn()
    done = await complete(coach, ctx)
    check(done["requiredAction"] == "offerVerifiedRecall", "autopilot: recall first")
    recall_start = len(coach.turns)

    ctx = await coach.turn()
    started = await coach.call("start_skillpilot_verified_recall")
    check(started["continuation"]["action"] == "presentQuestionsAndAwaitAnswers", "present all questions")
    check(started["receipt"] == {"stored": "recallStarted", "questions": 3, "stateVersion": started["context"]["stateVersion"]}, "recall receipt")
    check([q["position"] for q in started["questions"]] == [1, 2, 3], "ordered questions")
    check("answers" not in json.dumps(started["context"]), "no answers before release")

    ctx = await coach.turn()
    check(ctx["requiredAction"] == "answerVerifiedRecall", "the open batch is republished")
    answers = await coach.call("get_skillpilot_verified_recall_answers", {"batchCapability": ctx["openWorkflow"]["batchCapability"]})
    check(answers["continuation"] == {"action": "gradeGiveFeedbackAwaitConsent", "consentRequired": True}, "feedback and consent next")
    check(len(answers["answers"]) == 3, "complete ordered answers")

    ctx = await coach.turn()
    check(ctx["requiredAction"] == "recordVerifiedRecall", "answers released step republished")
    stored = await coach.call(
        "record_skillpilot_verified_recall_results",
        {"gradingCapability": ctx["openWorkflow"]["gradingCapability"], "assessments": [{"passed": True}, {"passed": True}, {"passed": False}]},
    )
    check(stored["receipt"]["stored"] == "recallResults" and stored["receipt"]["recorded"] == 3 and stored["receipt"]["passed"] == 2, "one atomic receipt")
    cont = stored["continuation"]
    check(cont["action"] == "renderGoalVisualizationThenTeachActiveGoal" and cont["consentRequired"] is False, "render continuation")
    check(set(cont["toolCall"]["arguments"]) == {"goalId", "expectedStateVersion"}, "server-filled render arguments")
    check(cont["toolCall"]["arguments"]["expectedStateVersion"] == stored["receipt"]["stateVersion"], "render bound to the new version")
    await coach.follow(stored)
    check(coach.turns[recall_start:] == [
        ["get_skillpilot_learning_context", "start_skillpilot_verified_recall"],
        ["get_skillpilot_learning_context", "get_skillpilot_verified_recall_answers"],
        ["get_skillpilot_learning_context", "record_skillpilot_verified_recall_results", "render_skillpilot_goal_visualization"],
    ], f"recall turns: {coach.turns[recall_start:]}")


async def journey_d(coach):
    """The exam is released only after mastery; the backend scores it."""
    await coach.begin()
    ctx = await coach.turn()
    refused = await coach.call("start_skillpilot_exam", expect_error=True)
    check(refused["outcome"] == "rejected" and refused["error"]["code"] == "NOT_ELIGIBLE", "exam not released yet")
    check(refused["error"]["evidence"]["missingGoals"] == 13, "what is missing, counted")
    ctx = await coach.turn()
    await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "autopilot", autopilot=True)})
    for _ in range(120):
        ctx = await coach.turn()
        action = ctx["requiredAction"]
        if action == "offerExam":
            break
        if action == "teachActiveGoal":
            await complete(coach, ctx)
        elif action == "offerVerifiedRecall":
            await coach.call("start_skillpilot_verified_recall")
        elif action == "answerVerifiedRecall":
            await coach.call("get_skillpilot_verified_recall_answers", {"batchCapability": ctx["openWorkflow"]["batchCapability"]})
        elif action == "recordVerifiedRecall":
            n = len(ctx["openWorkflow"]["questions"])
            recorded = await coach.follow(await coach.call(
                "record_skillpilot_verified_recall_results",
                {"gradingCapability": ctx["openWorkflow"]["gradingCapability"], "assessments": [{"passed": True}] * n},
            ))
            # Contract: one authoritative continuation; never confirm completion while the
            # exam is released and not taken.
            cont = recorded.get("continuation") or {}
            check(not (cont.get("action") == "confirmCompletion" and recorded["context"]["exam"]["released"]),
                  f"confirmCompletion while the exam is available: {json.dumps(cont)}")
        elif action == "chooseOption":
            await coach.follow(await coach.call("choose_skillpilot_option", {"option": ctx["options"][0]["payload"]}))
        else:
            fail(f"unexpected action {action}")
    check(ctx["requiredAction"] == "offerExam" and ctx["exam"]["released"], "exam released after mastery")
    check(ctx["progress"]["mastered"] == ctx["progress"]["total"], "everything mastered")
    ctx = await coach.turn()
    started = await coach.call("start_skillpilot_exam")
    check(started["continuation"]["action"] == "presentTasksAndAwaitWork" and len(started["tasks"]) == 5, "all tasks at once")
    ctx = await coach.turn()
    solutions = await coach.call("get_skillpilot_exam_solutions", {"examCapability": ctx["openWorkflow"]["examCapability"]})
    check(len(solutions["solutions"]) == 5, "all solutions")
    ctx = await coach.turn()
    scored = await coach.call(
        "record_skillpilot_exam_scores",
        {"scoringCapability": ctx["openWorkflow"]["scoringCapability"], "scores": [{"points": p} for p in [4, 3, 2.5, 3, 1]]},
    )
    check(scored["receipt"]["totalPoints"] == 13.5 and scored["receipt"]["maxPoints"] == 20 and scored["receipt"]["passed"] is True, f"backend scoring: {scored['receipt']}")
    check(scored["continuation"]["action"] == "reportExamResult", "report the result")


async def journey_e(coach):
    """A locale switch via option: all following text in the new locale."""
    await coach.begin()
    ctx = await coach.turn()
    check(ctx["communicationLocale"] == "de", "German first")
    switched = await coach.call("choose_skillpilot_option", {"option": coach.option(ctx, "locale", locale="en")})
    check(switched["communicationLocale"] == "en" and switched["requiredAction"] == "teachActiveGoal", "locale changes no action")
    check(coach.results[-1]["content"] == ["Choice saved."], f"summary in English: {coach.results[-1]['content']}")
    ctx = await coach.turn()
    check(ctx["activeGoal"]["title"] == "What a fraction means", "curriculum text in English")
    check(ctx["instruction"].startswith("Teach"), "instruction in English")
    check(ctx["planStatus"]["statusLine"].startswith("Today"), "status line in English")
    check(len(coach.calls) == 6, f"six calls: {coach.calls}")


JOURNEYS = {"a": journey_a, "b": journey_b, "c": journey_c, "d": journey_d, "e": journey_e}


async def play(session, journey):
    tools = await session.list_tools()
    check(len(tools.tools) == 10, "ten tools")
    resources = await session.list_resources()
    check([r.uri for r in resources.resources] == ["ui://skillpilot/goal-picture.html"], "the widget resource")
    coach = Coach(session)
    await JOURNEYS[journey](coach)
    print(json.dumps({"journey": journey, "calls": coach.calls, "turns": coach.turns, "results": coach.results}))


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--journey", required=True, choices=sorted(JOURNEYS))
    parser.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    args = parser.parse_args()
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {args.token}"})
    async with http:
        transport = streamable_http_client(args.url, http_client=http, terminate_on_close=False)
        if args.mode == "legacy":
            async with transport as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    check(init.protocol_version == "2025-11-25", f"legacy handshake negotiates 2025-11-25: {init.protocol_version}")
                    check(init.instructions and "SkillPilot coach" in init.instructions, "instructions from SKILL.md")
                    await play(session, args.journey)
        else:
            # The SDK's default client, in its default mode, as a host application would use it.
            async with Client(transport) as client:
                check(client.protocol_version == "2026-07-28", f"auto mode negotiates 2026-07-28: {client.protocol_version}")
                check(client.instructions and "SkillPilot coach" in client.instructions, "instructions from server/discover")
                await play(client, args.journey)


if __name__ == "__main__":
    asyncio.run(main())
