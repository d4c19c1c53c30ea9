// Drives SkillPilot's web pages in the system's headless Chromium (never a downloaded browser).
// Called by tests/it/web.rs:  node browser.mjs <scenario> <base-url> <token> <shots-dir> [expectations…]
// Exits non-zero with a message on the first broken expectation.
import { readFileSync } from "node:fs";
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
  } else if (scenario === "progress-focus") {
    const [area, count] = expect;
    await signIn("/progress");
    const shown = await page.locator("#focus").innerText();
    if (shown !== area) fail(`focus "${shown}", expected "${area}"`);
    const counted = await page.locator("#focus-count").innerText();
    if (counted !== count) fail(`focus count "${counted}", expected "${count}"`);
    const outlined = await page.locator("svg rect.focus").count();
    if (String(outlined) !== count.split(" / ")[1]) fail(`the graph outlines ${outlined} goals as the focus, expected ${count}`);
    await page.screenshot({ path: `${shots}/progress-focus.png`, fullPage: true });
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
  } else if (scenario === "headers") {
    // Every page carries its security headers, and its CSP does not break it (the start page's
    // time-zone script runs from /static, not inline).
    await signIn("/start");
    const r = await page.goto(`${base}/start`);
    const h = r.headers();
    if (!/frame-ancestors 'none'/.test(h["content-security-policy"] || "")) fail(`CSP: ${h["content-security-policy"]}`);
    if (!/script-src 'self'/.test(h["content-security-policy"] || "")) fail(`CSP script-src: ${h["content-security-policy"]}`);
    if (h["x-frame-options"] !== "DENY" || h["x-content-type-options"] !== "nosniff" || !h["referrer-policy"]) fail(`headers: ${JSON.stringify(h)}`);
    const tz = await page.locator("#time_zone").inputValue();
    if (!tz || tz === "") fail("the time-zone script did not run under the CSP");
  } else if (scenario === "widget") {
    // The goal-picture widget in a host page: only its host window (event.source === parent)
    // may hand it a picture, and the picture is shown as an image, never as live markup.
    const [widgetFile] = expect;
    const html = readFileSync(widgetFile, "utf8");
    await page.setContent(`<iframe id="w"></iframe><iframe id="evil"></iframe>`);
    await page.evaluate((doc) => new Promise((done) => {
      const w = document.getElementById("w");
      w.onload = done;
      w.srcdoc = doc;
    }), html);
    const picture = (svg, title) => ({ method: "ui/notifications/tool-result", params: { _meta: { "skillpilot/goalPicture": { svg, alt: "alt text", title } } } });
    const hostile = `<svg xmlns="http://www.w3.org/2000/svg" onload="top.pwned=1"><script>top.pwned=2</script><circle r="5"/></svg>`;
    // A sibling frame (not the host) posts: ignored.
    await page.evaluate((msg) => document.getElementById("evil").contentWindow.eval(
      `parent.document.getElementById("w").contentWindow.postMessage(${JSON.stringify(msg)}, "*")`), picture(hostile, "EVIL"));
    await page.waitForTimeout(300);
    const frame = await (await page.$("#w")).contentFrame();
    if (!frame) fail("widget frame not found");
    if ((await frame.locator("#picture *").count()) !== 0) fail("a message from a sibling frame was shown");
    // The host posts: shown as an <img>; its scripts never run.
    await page.evaluate((msg) => document.getElementById("w").contentWindow.postMessage(msg, "*"), picture(hostile, "Picture"));
    await frame.locator("figcaption").waitFor();
    if ((await frame.locator("#picture img").count()) !== 1) fail("the picture is not an <img>");
    if ((await frame.locator("#picture svg").count()) !== 0) fail("the picture was inserted as live markup");
    if ((await frame.locator("figcaption").innerText()) !== "Picture") fail("caption");
    await page.waitForTimeout(300);
    if (await page.evaluate(() => window.pwned)) fail("a script in the picture ran");
  } else {
    fail("unknown scenario");
  }
} finally {
  await browser.close();
}
