// Drives SkillPilot's web pages in the system's headless Chromium (never a downloaded browser).
// Called by tests/it/web.rs:  node browser.mjs <scenario> <base-url> <token> <shots-dir> [expectations…]
// Exits non-zero with a message on the first broken expectation.
import { chromium } from "playwright-core";

const [scenario, base, token, shots, ...expect] = process.argv.slice(2);
const fail = (msg) => { console.error(`browser test ${scenario} failed: ${msg}`); process.exit(1); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await (await browser.newContext({ locale: "de-DE" })).newPage();

async function signIn(next) {
  await page.goto(`${base}${next}`);
  await page.getByLabel(/Zugangsschlüssel|Access key/).fill(token);
  await page.getByRole("button", { name: /Anmelden|Sign in/ }).click();
  await page.waitForLoadState("domcontentloaded");
}

try {
  if (scenario === "start") {
    await signIn("/start");
    await page.getByLabel(/Lernplan|Curriculum/).selectOption("fractions");
    await page.getByLabel(/Sprache|Language/).selectOption("en");
    await page.screenshot({ path: `${shots}/start.png`, fullPage: true });
    await page.getByRole("button", { name: /starten|Start learning/ }).click();
    await page.waitForLoadState("domcontentloaded");
    const status = await page.getByRole("status").innerText();
    if (!/Go back to the chat/.test(status)) fail(`no plain go-back message: ${status}`);
    await page.screenshot({ path: `${shots}/started.png`, fullPage: true });
    // Cookies: the sign-in cookie is HttpOnly and SameSite=Lax.
    const cookies = await page.context().cookies();
    const web = cookies.find((c) => c.name === "sp_web");
    if (!web || !web.httpOnly || web.sameSite !== "Lax") fail(`sign-in cookie flags: ${JSON.stringify(web)}`);
  } else if (scenario === "progress") {
    const [mastered, active] = expect;
    await signIn("/progress");
    const count = await page.locator("#mastered-count").innerText();
    if (count !== mastered) fail(`mastered ${count}, expected ${mastered}`);
    const shown = await page.locator("#active-goal").innerText();
    if (shown !== active) fail(`active goal "${shown}", expected "${active}"`);
    const masteredNodes = await page.locator("svg g.goal-Mastered").count();
    if (String(masteredNodes) !== mastered) fail(`graph colours ${masteredNodes} goals as mastered`);
    if ((await page.locator("svg g.goal-Active").count()) !== 1) fail("the active goal is not marked in the graph");
    if ((await page.locator("svg line").count()) < 10) fail("prerequisite arrows missing");
    await page.setViewportSize({ width: 1100, height: 760 });
    await page.screenshot({ path: `${shots}/progress.png`, fullPage: true });
  } else if (scenario === "operator") {
    const [refusedTool] = expect;
    await signIn("/operator");
    const grade = await page.locator(`tr[data-tool="${refusedTool}"] td`).nth(1).innerText();
    if (grade !== "refused") fail(`${refusedTool} shows "${grade}"`);
    if (!(await page.getByText("noch keine Aussage").first().isVisible())) fail("'no statement yet' is not visible");
    await page.getByRole("button", { name: /Audit jetzt prüfen|Verify the audit/ }).click();
    await page.waitForLoadState("domcontentloaded");
    const audit = await page.locator("#audit-result").innerText();
    if (!/Alle Ketten intakt/.test(audit)) fail(`audit result: ${audit}`);
    await page.screenshot({ path: `${shots}/operator.png`, fullPage: true });
  } else if (scenario === "operator-refuses") {
    await signIn("/operator");
    const body = await page.locator("main").innerText();
    if (!/nur für den Betrieb/.test(body)) fail(`a non-operator sees: ${body}`);
  } else if (scenario === "csrf") {
    await page.goto(`${base}/start`);
    // A form posted without its CSRF token (cookie present, field missing) is refused.
    const status = await page.evaluate(async (t) => {
      const r = await fetch("/sign-in", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `token=${encodeURIComponent(t)}&next=%2Fstart` });
      return r.status;
    }, token);
    if (status !== 403) fail(`sign-in without CSRF token answered ${status}`);
    await signIn("/start");
    const started = await page.evaluate(async () => {
      const r = await fetch("/start", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "curriculum=fractions&locale=en&time_zone=UTC" });
      return r.status;
    });
    if (started !== 403) fail(`start without CSRF token answered ${started}`);
  } else {
    fail("unknown scenario");
  }
} finally {
  await browser.close();
}
