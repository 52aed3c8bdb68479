// tokengate operator pages: the "Copy" buttons, and the application form's sections that only
// one grant type needs (server-rendered hidden and disabled when another grant is chosen; shown
// here as soon as their grant is picked). Nothing else runs in the browser.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  const text = field.value ?? field.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    field.select();
    document.execCommand("copy");
  }
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1500);
});

function showGrantFields() {
  const select = document.getElementById("grant_type");
  if (!select) return;
  for (const section of document.querySelectorAll("fieldset[data-grant]")) {
    const shown = section.dataset.grant === select.value;
    section.hidden = !shown;
    section.disabled = !shown;
  }
}
document.addEventListener("change", (event) => {
  if (event.target.id === "grant_type") showGrantFields();
});
document.addEventListener("DOMContentLoaded", showGrantFields);
