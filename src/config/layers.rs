//! Where each kind of layer lives in a policy, so that [`Policies`](super::Policies)
//! builds, checks, reconfigures, reverts and snapshots every kind by one generic
//! function over [`LayerHandle`] instead of a copy per layer. Written once per kind
//! from the list in `policy_layers!` (the config module's root).

use seawall_core::{ConfigError, LayerHandle};

use super::document::{PolicyConfig, Section};
use super::policies::{PolicyHandles, PolicySnapshot};

/// One kind of layer's places: its table in a policy of the document, its handle's
/// slot among the policy's handles, and its snapshot's among the policy's snapshot.
pub(super) trait Placed: LayerHandle {
    /// The section (`policies.<name>.<key>`).
    const SECTION: Section;
    /// The policy's section for this layer, if it has one.
    fn section_of(policy: &PolicyConfig) -> Option<&Self::Config>;
    /// The slot of the policy's handle.
    fn handle_slot(handles: &mut PolicyHandles) -> &mut Option<Self>;
    /// The slot of the policy's snapshot.
    fn snapshot_slot(snapshot: &mut PolicySnapshot) -> &mut Option<Self::Snapshot>;
    /// The section's own validation (`validate` of the crate's configuration type).
    fn validate(config: &Self::Config) -> Result<(), ConfigError>;
    /// What the built layer would refuse of `config`, a valid section, that its
    /// validation cannot know (the fallback's steps), before anything changes.
    fn refused(&self, config: &Self::Config) -> Vec<ConfigError>;
}

macro_rules! places {
    ($($field:ident {
        feature: $feature:literal, section: $section:ident, module: $module:ident,
        config: $config:ident, $($_docs:tt)*
    })*) => {
        $(
            #[cfg(feature = $feature)]
            impl Placed for crate::$module::Handle {
                const SECTION: Section = Section::$section;
                fn section_of(policy: &PolicyConfig) -> Option<&Self::Config> {
                    policy.$field.as_ref()
                }
                fn handle_slot(handles: &mut PolicyHandles) -> &mut Option<Self> {
                    &mut handles.$field
                }
                fn snapshot_slot(snapshot: &mut PolicySnapshot) -> &mut Option<Self::Snapshot> {
                    &mut snapshot.$field
                }
                fn validate(config: &Self::Config) -> Result<(), ConfigError> {
                    crate::$module::$config::validate(config)
                }
                fn refused(&self, config: &Self::Config) -> Vec<ConfigError> {
                    super::$field::refused(self, config)
                }
            }
        )*

        /// Calls `each` with every kind of layer, in the order of the list.
        pub(super) fn each_place(each: &mut impl EachPlace) -> Result<(), ConfigError> {
            $(
                #[cfg(feature = $feature)]
                each.place::<crate::$module::Handle>()?;
            )*
            let _ = each;
            Ok(())
        }
    };
}

policy_layers!(places);

/// Something done with every kind of layer, whatever its kind.
pub(super) trait EachPlace {
    /// Does it with the kind whose handle is `H`.
    fn place<H: Placed>(&mut self) -> Result<(), ConfigError>;
}

/// Something done to every built layer of a policy, whatever its kind.
pub(super) trait EachLayer {
    /// Does it to `handle`.
    fn layer<H: Placed>(&mut self, handle: &H) -> Result<(), ConfigError>;
}

/// Calls `each` with every layer built in `handles`, stopping at the first error.
pub(super) fn each_layer(
    handles: &mut PolicyHandles,
    each: &mut impl EachLayer,
) -> Result<(), ConfigError> {
    struct Built<'a, E>(&'a mut PolicyHandles, &'a mut E);
    impl<E: EachLayer> EachPlace for Built<'_, E> {
        fn place<H: Placed>(&mut self) -> Result<(), ConfigError> {
            match H::handle_slot(self.0) {
                Some(handle) => self.1.layer(&*handle),
                None => Ok(()),
            }
        }
    }
    each_place(&mut Built(handles, each))
}

/// Calls `each` with every kind of layer and its section in `policy`, where it has one.
pub(super) fn each_section(
    policy: &PolicyConfig,
    mut each: impl FnMut(Section, Result<(), ConfigError>),
) {
    struct Sections<'a, F>(&'a PolicyConfig, F);
    impl<F: FnMut(Section, Result<(), ConfigError>)> EachPlace for Sections<'_, F> {
        fn place<H: Placed>(&mut self) -> Result<(), ConfigError> {
            if let Some(config) = H::section_of(self.0) {
                (self.1)(H::SECTION, H::validate(config));
            }
            Ok(())
        }
    }
    let _ = each_place(&mut Sections(policy, &mut each));
}

/// Whether the layer of `section` is configured differently in `old` and `new`.
pub(super) fn differs(old: &PolicyConfig, new: &PolicyConfig, section: Section) -> bool {
    struct Differs<'a>(&'a PolicyConfig, &'a PolicyConfig, Section, bool);
    impl EachPlace for Differs<'_> {
        fn place<H: Placed>(&mut self) -> Result<(), ConfigError> {
            if H::SECTION == self.2 {
                self.3 = H::section_of(self.0) != H::section_of(self.1);
            }
            Ok(())
        }
    }
    let mut differs = Differs(old, new, section, false);
    let _ = each_place(&mut differs);
    differs.3
}
